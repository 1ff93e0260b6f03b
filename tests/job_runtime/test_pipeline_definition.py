"""A pipeline that cannot run is refused when ``build`` runs, with a message naming the problem."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from job_runtime import Pipeline, sinks, sources
from job_runtime.errors import EntrypointError, PipelineDefinitionError, UserCodeError
from job_runtime.execution.entrypoint import build_pipeline
from job_runtime.execution.stages import plan_stages


def define(build: Callable[[Pipeline], None]) -> Pipeline:
    p = Pipeline(args={"output": "out"})
    build(p)
    p.validate()
    plan_stages(p)
    return p


def running_sum(p: Pipeline) -> None:
    (p.source(sources.sequence(count=10))
      .map(lambda r: {"key": r["seq"] % 3, "value": r["seq"]})
      .key_by("key")
      .reduce(lambda a, b: {"key": a["key"], "value": a["value"] + b["value"]})
      .sink(sinks.files(p.args["output"])))


def test_the_minimal_pipeline_is_planned_as_two_stages() -> None:
    stages = plan_stages(define(running_sum))
    assert len(stages) == 2
    assert [op.kind for op in stages[0].chain] == ["map"]
    assert stages[0].out_key is not None and stages[0].out_key.key == "key"
    assert stages[1].keyed is not None and stages[1].keyed.kind == "reduce"
    assert stages[1].has_sink and not stages[0].has_sink


def _no_source(p: Pipeline) -> None:
    pass


def _no_sink(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).map(lambda r: r)


def _two_sources(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).sink(sinks.discard())
    p.source(sources.sequence(count=1))


def _branching(p: Pipeline) -> None:
    stream = p.source(sources.sequence(count=1))
    stream.map(lambda r: r)
    stream.filter(lambda r: True)


def _after_sink(p: Pipeline) -> None:
    stream = p.source(sources.sequence(count=1))
    stream.sink(sinks.discard())
    stream.map(lambda r: r)


def _two_sinks(p: Pipeline) -> None:
    stream = p.source(sources.sequence(count=1))
    stream.sink(sinks.discard())
    stream.sink(sinks.discard())


def _not_a_source(p: Pipeline) -> None:
    p.source([1, 2, 3])  # type: ignore[arg-type]


def _not_a_sink(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).sink("out/")  # type: ignore[arg-type]


def _not_callable(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).map(42)  # type: ignore[arg-type]


def _unknown_aggregate(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by("seq").aggregate(x=("median", "seq"))


def _aggregate_without_column(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by("seq").aggregate(total="sum")


def _aggregate_by_function(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by(lambda r: r["seq"]).aggregate(n="count")


def _empty_aggregate(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by("seq").aggregate()


def _bad_key(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by(3)  # type: ignore[arg-type]


def _key_of_no_columns(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by([])


def _key_with_a_column_twice(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).key_by(["a", "a"])


def _duplicate_names(p: Pipeline) -> None:
    (p.source(sources.sequence(count=1))
      .map(lambda r: r, name="same").map(lambda r: r, name="same")
      .sink(sinks.discard()))


def _bad_sink_format(p: Pipeline) -> None:
    p.source(sources.sequence(count=1)).sink(sinks.files("out", format="xlsx"))


def _bad_source_format(p: Pipeline) -> None:
    p.source(sources.files("in", format="xml"))


@pytest.mark.parametrize(("build", "message"), [
    (_no_source, "did not call p.source"),
    (_no_sink, "did not end the pipeline with .sink"),
    (_two_sources, "the source 'sequence' is never read: join it to the first with union()"),
    (_branching, "linear"),
    (_after_sink, "nothing may follow the sink"),
    (_two_sinks, "the main stream has one sink"),
    (_not_a_source, "needs a source from job_runtime.sources, got list"),
    (_not_a_sink, "needs a sink from job_runtime.sinks, got str"),
    (_not_callable, "map() needs a function"),
    (_unknown_aggregate, "unknown function 'median'"),
    (_aggregate_without_column, "sum needs a column"),
    (_aggregate_by_function, "aggregate() needs key_by(<column name>)"),
    (_empty_aggregate, "at least one output"),
    (_bad_key, "key_by() needs a column name, a list of column names or a function"),
    (_key_of_no_columns, "key_by() with several columns needs their names, got []"),
    (_key_with_a_column_twice, "key_by() names a column twice: ['a', 'a']"),
    (_duplicate_names, "operator names must be unique"),
    (_bad_sink_format, "format must be one of jsonl, parquet, got 'xlsx'"),
    (_bad_source_format, "format must be one of text, jsonl, csv, parquet, got 'xml'"),
], ids=lambda v: v.__name__.strip("_") if callable(v) else "")
def test_an_invalid_pipeline_is_refused_with_a_clear_message(
        build: Callable[[Pipeline], None], message: str) -> None:
    with pytest.raises(PipelineDefinitionError) as info:
        define(build)
    assert message in str(info.value)
    assert str(info.value).startswith("invalid pipeline: ")


def test_a_key_by_must_be_followed_by_a_keyed_operator() -> None:
    def build(p: Pipeline) -> None:
        p.source(sources.sequence(count=1)).key_by("seq").sink(sinks.discard())  # type: ignore[attr-defined]

    with pytest.raises(AttributeError):
        define(build)

    p = Pipeline(args={})
    stream = p.source(sources.sequence(count=1))
    keyed = stream.key_by("seq")
    assert not hasattr(keyed, "map")
    p.sink_op = sinks.discard()
    with pytest.raises(PipelineDefinitionError, match="must be followed by a keyed operator"):
        plan_stages(p)


# --------------------------------------------------------------------------- entrypoints


@pytest.fixture
def job_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("pipeline_def_job")]:
            del sys.modules[name]


def write_job(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(body))


def test_an_entrypoint_builds_the_pipeline_with_the_job_args(job_dir: Path) -> None:
    write_job(job_dir, "pipeline_def_job_ok", """
        from job_runtime import sinks, sources
        def build(p):
            p.source(sources.sequence(count=int(p.args["count"]))).sink(sinks.discard())
    """)
    p = build_pipeline(entrypoint="pipeline_def_job_ok:build", args={"count": 5}, name="j")
    assert p.source_op is not None and p.source_op.count == 5  # type: ignore[attr-defined]


@pytest.mark.parametrize(("entrypoint", "problem"), [
    ("pipeline_def_job_missing:build", "module 'pipeline_def_job_missing' not found"),
    ("no_colon", "expected the form module:function"),
    ("pipeline_def_job_nofn:nothing", "has no function 'nothing'"),
])
def test_a_wrong_entrypoint_is_an_entrypoint_error(job_dir: Path, entrypoint: str,
                                                  problem: str) -> None:
    write_job(job_dir, "pipeline_def_job_nofn", "x = 1\n")
    with pytest.raises(EntrypointError) as info:
        build_pipeline(entrypoint=entrypoint, args={}, name="j")
    assert problem in str(info.value)
    assert "\n" not in str(info.value)


def test_an_exception_in_build_is_user_code_with_its_traceback(job_dir: Path) -> None:
    write_job(job_dir, "pipeline_def_job_raises", """
        def build(p):
            raise KeyError("input")
    """)
    with pytest.raises(UserCodeError) as info:
        build_pipeline(entrypoint="pipeline_def_job_raises:build", args={}, name="j")
    assert "KeyError: 'input'" in info.value.details
    assert "pipeline_def_job_raises.py" in info.value.details
