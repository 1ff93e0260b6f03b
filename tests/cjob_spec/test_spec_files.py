"""load_job_file: a job file is one YAML document, and every way it can be wrong is said."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from spec_documents import minimal, with_field

from cjob_spec import CjobSpecError, JobFileError, SpecError, load_job_file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_file_is_loaded(tmp_path: Path) -> None:
    job = load_job_file(write(tmp_path, yaml.safe_dump(minimal())))
    assert job.metadata.name == "clicks"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(JobFileError) as caught:
        load_job_file(tmp_path / "nope.yaml")
    assert str(caught.value) == f"{tmp_path / 'nope.yaml'}: no such file"


def test_a_directory_is_not_a_job_file(tmp_path: Path) -> None:
    with pytest.raises(JobFileError, match="is a directory"):
        load_job_file(tmp_path)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_an_empty_file_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(JobFileError) as caught:
        load_job_file(write(tmp_path, text))
    assert caught.value.problem == "is empty; expected one CheckpointedJob document"


def test_invalid_yaml_reports_its_line(tmp_path: Path) -> None:
    text = "apiVersion: checkpointed.io/v1alpha1\nkind: CheckpointedJob\nmetadata: {name: x\nspec: {}\n"
    with pytest.raises(JobFileError) as caught:
        load_job_file(write(tmp_path, text))
    assert caught.value.line is not None and caught.value.line >= 3
    assert str(caught.value).startswith(
        f"{tmp_path / 'job.yaml'}:{caught.value.line}: invalid YAML"
    )


def test_bad_indentation_reports_its_line(tmp_path: Path) -> None:
    text = "spec:\n  image: x\n    job: y\n"
    with pytest.raises(JobFileError) as caught:
        load_job_file(write(tmp_path, text))
    assert caught.value.line == 3


def test_two_documents_are_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump(minimal()) + "---\n" + yaml.safe_dump(minimal())
    with pytest.raises(JobFileError, match="holds 2 YAML documents; expected one"):
        load_job_file(write(tmp_path, text))


def test_a_list_is_not_a_job(tmp_path: Path) -> None:
    with pytest.raises(
        JobFileError, match=r"must hold a mapping \(a CheckpointedJob\), got a list"
    ):
        load_job_file(write(tmp_path, "- a\n- b\n"))


def test_spec_problems_in_a_file_raise_spec_errors(tmp_path: Path) -> None:
    document = with_field(minimal(), "spec.checkpoint.retained", 0)
    with pytest.raises(SpecError) as caught:
        load_job_file(write(tmp_path, yaml.safe_dump(document)))
    assert str(caught.value) == "spec.checkpoint.retained: must be >= 1, got 0"
    assert isinstance(caught.value, CjobSpecError)


def test_an_unquoted_date_in_args_is_explained(tmp_path: Path) -> None:
    text = """
apiVersion: checkpointed.io/v1alpha1
kind: CheckpointedJob
metadata: {name: clicks}
spec:
  image: example.org/clicks:1.0
  job: {entrypoint: "clicks.job:build", args: {since: 2024-01-01}}
  checkpoint: {storage: "file:///data/ckpt"}
"""
    with pytest.raises(SpecError) as caught:
        load_job_file(write(tmp_path, text))
    assert caught.value.field == "spec.job.args.since"
    assert caught.value.hint == "quote dates and times"
