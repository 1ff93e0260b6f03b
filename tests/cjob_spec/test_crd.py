"""The CRD agrees with the model: names, printer columns, defaults, fields, and what
its schema refuses. Applying it to a real API server is tested with the operator."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from paths import REPO as ROOT
from spec_documents import full, full_status, minimal, with_field

from cjob_spec import JobStatus, SpecError, parse_job
from cjob_spec.parse import MASTER_PATTERN, S3_STORAGE_PATTERN

jsonschema = pytest.importorskip("jsonschema")

CRD_PATH = ROOT / "crds" / "checkpointedjob.yaml"


def load_crd() -> dict[str, Any]:
    document = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


CRD = load_crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA: dict[str, Any] = VERSION["schema"]["openAPIV3Schema"]
SPEC_SCHEMA: dict[str, Any] = SCHEMA["properties"]["spec"]
STATUS_SCHEMA: dict[str, Any] = SCHEMA["properties"]["status"]


def validate(document: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return [error.message for error in validator.iter_errors(document)]


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Structural defaulting as the API server does it: fill absent fields that have a
    default, recursing into objects that exist (or were just defaulted)."""
    if not isinstance(value, dict) or "properties" not in schema:
        return value
    result = dict(value)
    for key, child in schema["properties"].items():
        if key not in result and "default" in child:
            result[key] = copy.deepcopy(child["default"])
        if key in result:
            result[key] = apply_defaults(child, result[key])
    return result


def schema_nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from schema_nodes(child, f"{path}.{key}" if path else key)
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}.*")


def leaf_paths(value: Any, path: str, opaque: set[str]) -> set[str]:
    if isinstance(value, dict) and path not in opaque:
        paths: set[str] = set()
        for key, child in value.items():
            paths |= leaf_paths(child, f"{path}.{key}", opaque)
        return paths
    return {path}


def schema_leaf_paths(schema: dict[str, Any], path: str) -> set[str]:
    if "properties" not in schema:
        return {path}
    paths: set[str] = set()
    for key, child in schema["properties"].items():
        paths |= schema_leaf_paths(child, f"{path}.{key}")
    return paths


# --- identity ------------------------------------------------------------------------


def test_the_crd_names_the_checkpointed_job_kind() -> None:
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["kind"] == "CustomResourceDefinition"
    assert CRD["metadata"]["name"] == "checkpointedjobs.checkpointed.io"
    spec = CRD["spec"]
    assert spec["group"] == "checkpointed.io"
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        "CheckpointedJob",
        "checkpointedjobs",
        "checkpointedjob",
    )
    assert names["shortNames"] == ["cjob", "cjobs"]
    assert names["categories"]


def test_v1alpha1_is_the_one_served_and_stored_version_with_status_and_scale() -> None:
    versions = CRD["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [("v1alpha1", True, True)]
    assert VERSION["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.parallelism", "statusReplicasPath": ".status.parallelism",
        "labelSelectorPath": ".status.selector"}}


def test_the_scale_subresources_paths_are_fields_the_operator_writes() -> None:
    schema = VERSION["schema"]["openAPIV3Schema"]["properties"]
    assert schema["spec"]["properties"]["parallelism"]["type"] == "integer"
    status = schema["status"]["properties"]
    assert status["parallelism"]["type"] == "integer"
    assert status["selector"]["type"] == "string"
    written = JobStatus(parallelism=3, selector="checkpointed.io/job=sums").to_dict()
    assert (written["parallelism"], written["selector"]) == (3, "checkpointed.io/job=sums")
    assert JobStatus.from_dict(written).parallelism == 3


def test_kubectl_get_shows_phase_attempt_restarts_and_checkpoint_columns() -> None:
    columns = [(c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
               for c in VERSION["additionalPrinterColumns"]]
    assert columns == [
        ("Phase", "string", ".status.phase", 0),
        ("Attempt", "integer", ".status.attempt", 0),
        ("Restarts", "integer", ".status.restarts", 0),
        ("Last Checkpoint", "integer", ".status.latestCheckpoint.id", 0),
        ("Checkpoint Age", "date", ".status.latestCheckpoint.completedAt", 0),
        ("Age", "date", ".metadata.creationTimestamp", 0),
        # -o wide: the parallelism it runs at, and the one its autoscaler recommends.
        ("Parallelism", "integer", ".status.parallelism", 1),
        ("Recommended", "integer", ".status.autoscaler.recommended", 1),
    ]


# --- structural schema ---------------------------------------------------------------


def test_every_schema_node_is_structural() -> None:
    for path, node in schema_nodes(SCHEMA):
        if node.get("x-kubernetes-int-or-string"):
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
            continue
        assert "type" in node, f"{path or 'root'} has no type"
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", path
        assert "anyOf" not in node and "oneOf" not in node, path


def test_every_validation_rule_has_a_message() -> None:
    rules = [
        (path, rule)
        for path, node in schema_nodes(SCHEMA)
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 10
    for path, rule in rules:
        assert rule["rule"].strip() and rule["message"].strip(), path


def test_the_spec_schema_has_exactly_the_fields_the_parser_reads() -> None:
    document = full()
    parse_job(document)
    opaque = {".spec.job.args", ".spec.spark.conf", ".spec.pod.nodeSelector",
              ".spec.pod.affinity.nodeAffinity", ".spec.pod.affinity.podAffinity",
              ".spec.pod.affinity.podAntiAffinity",
              ".spec.pod.env.valueFrom",
              *(f".spec.pod.{role}Template.{field}" for role in ("driver", "executor")
                for field in ("spec", "metadata.labels", "metadata.annotations"))}
    # restore.snapshot and restore.from exclude each other: a second document has the one.
    from_snapshot = full()
    from_snapshot["spec"]["restore"] = {"snapshot": "before-upgrade"}
    parse_job(from_snapshot)
    read = leaf_paths(document["spec"], ".spec", opaque) | leaf_paths(
        from_snapshot["spec"], ".spec", opaque)
    assert read == schema_leaf_paths(SPEC_SCHEMA, ".spec")


def test_the_status_schema_covers_every_field_the_operator_writes() -> None:
    written = leaf_paths(full_status().to_dict(), ".status", {".status.lastStableSpec.spec"})
    declared = schema_leaf_paths(STATUS_SCHEMA, ".status")
    assert {path for path in written if not path.startswith(".status.conditions")} <= declared
    assert validate(full_status().to_dict(), STATUS_SCHEMA) == []


# --- defaults ------------------------------------------------------------------------


@pytest.mark.parametrize("document", [minimal(), full()], ids=["minimal", "full"])
def test_api_server_defaulting_does_not_change_what_a_job_means(document: dict[str, Any]) -> None:
    defaulted = apply_defaults(SCHEMA, document)
    assert validate(defaulted) == []
    assert parse_job(defaulted) == parse_job(document)


def test_defaulting_fills_every_optional_section() -> None:
    defaulted = apply_defaults(SCHEMA, minimal())["spec"]
    assert defaulted["restartPolicy"]["backoff"] == {"initial": "10s", "max": "5m", "multiplier": 2}
    assert defaulted["checkpoint"]["interval"] == "10s"
    assert defaulted["spark"]["executor"] == {"instances": 1, "cores": 1, "memory": "1Gi"}
    assert defaulted["restore"] == {"from": "latest", "onUnreadable": "Fail",
                                    "allowForeignJob": False, "allowNonRestoredState": False}
    assert defaulted["cleanupPolicy"] == {"checkpoints": "Retain"}
    assert defaulted["state"] == {"backend": "hashmap"}


# --- what the schema refuses ---------------------------------------------------------

M = minimal()

SCHEMA_REFUSALS: list[tuple[str, dict[str, Any]]] = [
    ("missing storage", with_field(M, "spec.checkpoint", {})),
    ("bad entrypoint", with_field(M, "spec.job.entrypoint", "clicks.job")),
    ("parallelism zero", with_field(M, "spec.parallelism", 0)),
    ("parallelism as a string", with_field(M, "spec.parallelism", "4")),
    ("max parallelism too large", with_field(M, "spec.maxParallelism", 40000)),
    ("unknown mode", with_field(M, "spec.checkpoint.mode", "exactlyonce")),
    ("no retained checkpoint", with_field(M, "spec.checkpoint.retained", 0)),
    ("negative tolerable failures", with_field(M, "spec.checkpoint.tolerableFailures", -1)),
    ("interval without unit", with_field(M, "spec.checkpoint.interval", "10")),
    ("interval as a number", with_field(M, "spec.checkpoint.interval", 10)),
    ("negative backoff", with_field(M, "spec.restartPolicy.backoff.initial", "-1s")),
    ("shrinking backoff", with_field(M, "spec.restartPolicy.backoff.multiplier", 0.5)),
    ("unknown restart type", with_field(M, "spec.restartPolicy.type", "Sometimes")),
    ("memory in GB", with_field(M, "spec.spark.driver.memory", "2GB")),
    ("restore from hdfs", with_field(M, "spec.restore.from", "hdfs://nn/chk-1")),
    ("unknown cleanup", with_field(M, "spec.cleanupPolicy.checkpoints", "Keep")),
    ("unknown state backend", with_field(M, "spec.state.backend", "memory")),
    ("suspend as a string", with_field(M, "spec.suspend", "true")),
    ("conf value as a boolean", with_field(M, "spec.spark.conf", {"spark.ui.enabled": False})),
    ("trigger nonce as a number", with_field(M, "spec.checkpoint.triggerNonce", 3)),
    (
        "credentials secret that is no object name",
        with_field(
            with_field(M, "spec.checkpoint.storage", "s3://bucket/x"),
            "spec.checkpoint.s3.credentialsSecret",
            "S3_Keys",
        ),
    ),
    (
        "endpoint without scheme",
        with_field(
            with_field(M, "spec.checkpoint.storage", "s3://bucket/x"),
            "spec.checkpoint.s3.endpoint",
            "minio:9000",
        ),
    ),
]


@pytest.mark.parametrize("document", [pytest.param(d, id=case) for case, d in SCHEMA_REFUSALS])
def test_the_schema_and_the_parser_refuse_the_same_mistakes(document: dict[str, Any]) -> None:
    assert validate(apply_defaults(SCHEMA, document)) != []
    with pytest.raises(SpecError):
        parse_job(document)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.spark.driver.memory", 2147483648),
        ("spec.spark.driver.memory", "512m"),
        ("spec.restore.from", 42),
        ("spec.restore.from", "s3://bucket/job-u/chk-42/_metadata"),
        ("spec.spark.conf", {"spark.sql.shuffle.partitions": 8}),
        ("spec.checkpoint.interval", "1h30m"),
        ("spec.checkpoint.interval", "250ms"),
    ],
)
def test_the_schema_accepts_every_form_the_parser_accepts(path: str, value: Any) -> None:
    document = with_field(minimal(), path, value)
    parse_job(document)
    assert validate(apply_defaults(SCHEMA, document)) == []


# --- CEL rules -----------------------------------------------------------------------


def cel_regexes(rule: str) -> list[str]:
    """The regular expressions of ``matches('...')`` calls, CEL escapes undone."""
    return [
        literal.replace("\\\\", "\\")
        for literal in re.findall(r"matches\('((?:[^'\\]|\\.)*)'\)", rule)
    ]


def rule_of(path: str) -> str:
    node: dict[str, Any] = SCHEMA
    for key in path.split("."):
        node = node["properties"][key]
    rules = node["x-kubernetes-validations"]
    return str(rules[0]["rule"])


@pytest.mark.parametrize(
    "master", ["local[1]", "local[*]", "local[4,3]", "local[0]", "local[]", "local[4,]", "yarn"]
)
def test_the_crd_master_rule_matches_the_parser(master: str) -> None:
    (regex,) = cel_regexes(rule_of("spec.spark.master"))
    assert bool(re.search(regex, master)) == bool(MASTER_PATTERN.match(master))


@pytest.mark.parametrize(
    "storage",
    ["file:///data", "file://data", "s3://bucket/p", "s3://b", "s3://Bucket/p", "hdfs://x/y"],
)
def test_the_crd_storage_rule_matches_the_parser(storage: str) -> None:
    file_regex, s3_regex = cel_regexes(rule_of("spec.checkpoint.storage"))
    crd_accepts = bool(re.search(file_regex, storage) or re.search(s3_regex, storage))
    parser_accepts = bool(storage.startswith("file:///") or S3_STORAGE_PATTERN.match(storage))
    assert crd_accepts == parser_accepts


@pytest.mark.parametrize(
    "entry",
    [
        "jobs/",
        "/opt/cjob/jobs/my-job",
        "my jobs",
        "s3://code/jobs/clicks.zip",
        "s3://code/clicks",
        "s3://code/jobs/",
        "s3://code.zip",
        "s3://Code/clicks.zip",
        "s3a://code/clicks.zip",
        "gs://code/clicks.zip",
        "file:///opt/jobs",
        " jobs",
        "jobs ",
    ],
)
def test_the_crd_python_path_rules_match_the_parser(entry: str) -> None:
    items = SPEC_SCHEMA["properties"]["job"]["properties"]["pythonPath"]["items"]
    url_rule, space_rule = (str(rule["rule"]) for rule in items["x-kubernetes-validations"])
    url_regex, s3_regex = cel_regexes(url_rule)
    leading, trailing = cel_regexes(space_rule)
    crd_accepts = (not re.search(url_regex, entry) or bool(re.search(s3_regex, entry))) and not (
        re.search(leading, entry) or re.search(trailing, entry)
    )
    try:
        parse_job(with_field(minimal(), "spec.job.pythonPath", [entry]))
        parser_accepts = True
    except SpecError:
        parser_accepts = False
    assert crd_accepts == parser_accepts


def test_a_job_without_an_image_is_valid_for_the_schema_and_the_parser() -> None:
    document = minimal()
    del document["spec"]["image"]
    assert "image" not in SPEC_SCHEMA["required"]
    assert validate(apply_defaults(SCHEMA, document)) == []
    assert parse_job(document).spec.image is None


def test_the_crd_allows_s3_settings_for_s3_code_as_the_parser_does() -> None:
    (rule,) = [
        str(r["rule"]) for r in SPEC_SCHEMA["x-kubernetes-validations"] if "self.checkpoint.s3" in r["rule"]
    ]
    assert "self.checkpoint.storage.startsWith('s3://')" in rule
    assert "self.job.pythonPath.exists(p, p.startsWith('s3://'))" in rule
    checkpoint = SPEC_SCHEMA["properties"]["checkpoint"]
    assert not any("self.s3" in r["rule"] for r in checkpoint.get("x-kubernetes-validations", []))


# --- examples ------------------------------------------------------------------------


def example_jobs() -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted((ROOT / "examples").glob("**/*.yaml")) + sorted(
        (ROOT / "examples").glob("**/*.yml")
    ):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CheckpointedJob":
                found.append((str(path.relative_to(ROOT)), document))
    return found


EXAMPLES = example_jobs()


@pytest.mark.skipif(not EXAMPLES, reason="examples/ holds no CheckpointedJob yet")
@pytest.mark.parametrize(
    "document", [pytest.param(document, id=name) for name, document in EXAMPLES]
)
def test_every_example_job_is_valid_for_the_parser_and_the_crd(document: dict[str, Any]) -> None:
    parse_job(document)
    assert validate(apply_defaults(SCHEMA, document)) == []
