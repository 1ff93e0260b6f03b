"""The CRD's defaults and bounds are the spec's own, field by field.

The CRD repeats every default (so ``kubectl get -o yaml`` shows what a job runs
with) and every bound (so the API server refuses what the parser refuses). The values
themselves live once, in ``cjob_spec.defaults``, which the model and the parser use;
these tests walk the CRD's schema and compare each ``default``, ``minimum``,
``maximum`` and duration rule it states with that module, and the module with the
model, so none of the three can drift from the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from paths import REPO as ROOT
from spec_documents import minimal

from cjob_spec import parse_job
from cjob_spec.defaults import (
    SPEC_FIELDS,
    DurationField,
    FlagField,
    IntegerField,
    MemoryField,
    NumberField,
    SpecField,
    TextField,
)
from cjob_spec.durations import Duration
from cjob_spec.model import (
    CheckpointSpec,
    CleanupPolicy,
    JobCode,
    JobSpec,
    RestartPolicy,
    RestoreSpec,
    SparkSpec,
)
from cjob_spec.parse import MAX_JOB_NAME_LENGTH
from cjob_spec.quantities import Memory
from cjob_spec.security import MAX_ID

CRD_PATH = ROOT / "crds" / "checkpointedjob.yaml"
FIELDS_BY_PATH: dict[str, SpecField] = {field.path: field for field in SPEC_FIELDS}
SECURITY_CONTEXTS = ("spec.pod.securityContext", "spec.pod.containerSecurityContext")


def root_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def spec_schema() -> dict[str, Any]:
    return dict(root_schema()["properties"]["spec"])


def schema_nodes(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every node of the schema with its document path (``[]`` for list items)."""
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}.*")


SCHEMA_NODES = dict(schema_nodes(spec_schema(), "spec"))


def stated_defaults() -> dict[str, object]:
    """The CRD's defaults of values (a section's ``default: {}`` only makes the API
    server default the fields inside it)."""
    return {
        path: node["default"]
        for path, node in SCHEMA_NODES.items()
        if "default" in node and node["default"] != {}
    }


def stated_bounds() -> dict[str, tuple[object, object]]:
    return {
        path: (node.get("minimum"), node.get("maximum"))
        for path, node in SCHEMA_NODES.items()
        if "minimum" in node or "maximum" in node
    }


DURATION_RULE = re.compile(r"^duration\(self\) (<=|>=|>) duration\('([^']*)'\)$")


def duration_rules(node: dict[str, Any]) -> dict[str, str]:
    """The CRD's CEL bounds of a duration field, by comparison operator."""
    bounds: dict[str, str] = {}
    for rule in node.get("x-kubernetes-validations", []):
        match = DURATION_RULE.match(str(rule["rule"]).strip())
        if match is not None:
            bounds[match.group(1)] = match.group(2)
    return bounds


# --- defaults ------------------------------------------------------------------------


def test_every_default_the_crd_states_is_the_spec_default_of_that_field() -> None:
    drift = []
    for path, value in stated_defaults().items():
        field = FIELDS_BY_PATH.get(path)
        if field is None:
            drift.append(f"{path}: the CRD has default {value!r}, cjob_spec.defaults has none")
        elif value != field.default or isinstance(value, bool) != isinstance(field.default, bool):
            drift.append(f"{path}: the CRD says {value!r}, cjob_spec.defaults says "
                         f"{field.default!r}")
    assert drift == []


def test_every_spec_default_is_stated_by_the_crd() -> None:
    stated = stated_defaults()
    assert [field.path for field in SPEC_FIELDS if field.path not in stated] == []


# --- bounds --------------------------------------------------------------------------


def test_every_bound_the_crd_states_is_the_bound_the_parser_applies() -> None:
    drift = []
    for path, (minimum, maximum) in stated_bounds().items():
        if path.startswith(SECURITY_CONTEXTS):
            expected: tuple[object, object] = (0, MAX_ID)
        else:
            field = FIELDS_BY_PATH.get(path)
            if not isinstance(field, IntegerField | NumberField):
                drift.append(f"{path}: the CRD bounds it, cjob_spec.defaults does not")
                continue
            expected = (field.minimum, field.maximum)
        if (minimum, maximum) != expected:
            drift.append(f"{path}: the CRD says {minimum}..{maximum}, the parser "
                         f"{expected[0]}..{expected[1]}")
    assert drift == []


def test_every_numeric_field_of_the_spec_is_bounded_in_the_crd() -> None:
    stated = stated_bounds()
    numeric = [field for field in SPEC_FIELDS if isinstance(field, IntegerField | NumberField)]
    assert numeric
    assert [field.path for field in numeric if field.path not in stated] == []


def test_every_duration_bound_in_the_crd_rules_is_the_bound_the_parser_applies() -> None:
    durations = [field for field in SPEC_FIELDS if isinstance(field, DurationField)]
    assert durations
    drift = []
    for field in durations:
        rules = duration_rules(SCHEMA_NODES[field.path])
        stated = (
            rules.get("<="),
            rules.get(">=", "0s"),
            rules.get(">") == "0s",
        )
        expected = (field.maximum, field.minimum, field.positive)
        if stated != expected:
            drift.append(f"{field.path}: the CRD says (max, min, >0) {stated}, the parser "
                         f"{expected}")
    assert drift == []


def test_every_duration_in_the_crd_is_a_duration_field_of_the_spec() -> None:
    pattern = SCHEMA_NODES["spec.checkpoint.interval"]["pattern"]
    paths = {path for path, node in SCHEMA_NODES.items() if node.get("pattern") == pattern}
    assert paths == {f.path for f in SPEC_FIELDS if isinstance(f, DurationField)}


def test_the_crds_job_name_length_is_the_parsers() -> None:
    (rule,) = [str(r["rule"]) for r in root_schema()["x-kubernetes-validations"]
               if "metadata.name" in r["rule"]]
    stated = re.search(r"size\(self\.metadata\.name\) <= ([0-9]+)", rule)
    assert stated is not None, rule
    assert int(stated.group(1)) == MAX_JOB_NAME_LENGTH


# --- the model -----------------------------------------------------------------------


def model_value(spec: JobSpec, path: str) -> object:
    """The value of a document path in the model, in the form the document uses."""
    value: object = spec
    for key in path.split(".")[1:]:
        attribute = "source" if key == "from" else re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()
        value = getattr(value, attribute)
    if isinstance(value, Duration | Memory):
        return value.text
    if hasattr(value, "pointer"):
        return value.pointer
    if hasattr(value, "value"):
        return value.value
    return value


def default_spec() -> JobSpec:
    return JobSpec(job=JobCode(entrypoint="clicks.job:build"),
                   checkpoint=CheckpointSpec(storage="file:///data/ckpt"))


@pytest.mark.parametrize("field", [pytest.param(f, id=f.path) for f in SPEC_FIELDS])
def test_the_models_default_is_the_declared_default(field: SpecField) -> None:
    assert model_value(default_spec(), field.path) == field.default


@pytest.mark.parametrize("field", [pytest.param(f, id=f.path) for f in SPEC_FIELDS])
def test_a_job_that_leaves_a_field_out_gets_the_declared_default(field: SpecField) -> None:
    assert model_value(parse_job(minimal()).spec, field.path) == field.default


def test_a_job_that_leaves_every_section_out_is_the_default_model() -> None:
    spec = parse_job(minimal()).spec
    assert spec.spark == SparkSpec()
    assert spec.restart_policy == RestartPolicy()
    assert spec.restore == RestoreSpec()
    assert spec.cleanup_policy == CleanupPolicy()
    assert spec.checkpoint == CheckpointSpec(storage=spec.checkpoint.storage)
    assert (spec.parallelism, spec.max_parallelism, spec.suspend) == (
        default_spec().parallelism, default_spec().max_parallelism, default_spec().suspend)


@pytest.mark.parametrize(
    "kind", [IntegerField, NumberField, DurationField, MemoryField, TextField, FlagField])
def test_every_kind_of_field_is_declared_at_least_once(kind: type[SpecField]) -> None:
    assert any(isinstance(field, kind) for field in SPEC_FIELDS)
