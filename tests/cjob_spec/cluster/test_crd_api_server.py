"""The CRD's rules about images and job code, enforced by a real API server.

The schema tests next door check the CEL regular expressions against the parser's;
these apply documents to the local control plane's kube-apiserver, which compiles and
runs every rule, so a rule that does not compile or means something else fails here.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spec_documents import minimal, with_field

from cjob_spec import SpecError, parse_job
from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.operator_process import JOBS_PATH, install_crd


@pytest.fixture(scope="module")
def crd(kube_rest: RestClient) -> None:
    install_crd(kube_rest)


def create(rest: RestClient, namespace: str, document: dict[str, Any]) -> str | None:
    """Create the job with a server-side dry run; the API server's complaint, if any."""
    body = copy.deepcopy(document)
    body["metadata"]["namespace"] = namespace
    path = JOBS_PATH.format(namespace=quote(namespace)) + "?dryRun=All"
    try:
        rest.request("POST", path, body=body)
    except ApiError as exc:
        if exc.status != 422:
            raise
        return exc.message
    return None


def parser_complaint(document: dict[str, Any]) -> str | None:
    try:
        parse_job(document)
    except SpecError as exc:
        return str(exc)
    return None


S3_CODE = "s3://code/jobs/clicks.zip"
FOREIGN = "file:///var/lib/cjob/checkpoints/sums-0a1b2c/chk-7/_metadata"
WITH_S3_SETTINGS = with_field(minimal(), "spec.checkpoint.s3", {"endpoint": "http://minio:9000"})

ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("no image", {**minimal(), "spec": {k: v for k, v in minimal()["spec"].items()
                                        if k != "image"}}),
    ("configmap folder", with_field(minimal(), "spec.job.pythonPath", ["/opt/cjob/jobs/x"])),
    ("relative folder", with_field(minimal(), "spec.job.pythonPath", ["jobs/"])),
    ("s3 zip", with_field(minimal(), "spec.job.pythonPath", [S3_CODE])),
    ("s3 settings for s3 code", with_field(WITH_S3_SETTINGS, "spec.job.pythonPath", [S3_CODE])),
    ("another job's checkpoint, allowed",
     with_field(with_field(minimal(), "spec.restore.from", FOREIGN), "spec.restore.allowForeignJob",
                True)),
    ("affinity of every kind", with_field(minimal(), "spec.pod.affinity", {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "disk", "operator": "In", "values": ["ssd"]}]}]}},
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "podAffinityTerm": {"topologyKey": "zone",
                                               "labelSelector": {"matchLabels": {"a": "b"}}}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname"}]},
    })),
    ("adjusted security contexts", with_field(
        with_field(minimal(), "spec.pod.securityContext",
                   {"runAsUser": 1000, "seccompProfile": {"type": "Localhost",
                                                          "localhostProfile": "spark.json"}}),
        "spec.pod.containerSecurityContext",
        {"privileged": True, "allowPrivilegeEscalation": True})),
]

REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("s3 folder", with_field(minimal(), "spec.job.pythonPath", ["s3://code/jobs/"]),
     "s3://bucket/path/code.zip"),
    ("gs zip", with_field(minimal(), "spec.job.pythonPath", ["gs://code/x.zip"]),
     "s3://bucket/path/code.zip"),
    ("trailing space", with_field(minimal(), "spec.job.pythonPath", ["/opt/jobs "]),
     "must not start or end with spaces"),
    ("s3 settings without any s3", WITH_S3_SETTINGS,
     "only valid with s3:// storage or s3:// entries in job.pythonPath"),
    ("another job allowed without a path",
     with_field(minimal(), "spec.restore.allowForeignJob", True),
     "allowForeignJob applies only to a checkpoint path"),
    ("another job allowed with a checkpoint id",
     with_field(with_field(minimal(), "spec.restore.from", 7), "spec.restore.allowForeignJob",
                True),
     "allowForeignJob applies only to a checkpoint path"),
    ("localhost seccomp without a profile",
     with_field(minimal(), "spec.pod.securityContext", {"seccompProfile": {"type": "Localhost"}}),
     "localhostProfile is required with type Localhost"),
    ("a profile with runtime default",
     with_field(minimal(), "spec.pod.containerSecurityContext",
                {"appArmorProfile": {"type": "RuntimeDefault", "localhostProfile": "x"}}),
     "localhostProfile is required with type Localhost"),
    ("privileged without privilege escalation",
     with_field(minimal(), "spec.pod.containerSecurityContext", {"privileged": True}),
     "privileged needs allowPrivilegeEscalation true"),
    ("lower-case capability",
     with_field(minimal(), "spec.pod.containerSecurityContext",
                {"capabilities": {"drop": ["all"]}}),
     "spec.pod.containerSecurityContext.capabilities.drop[0]"),
    ("credentials secret that is no object name",
     with_field(with_field(minimal(), "spec.checkpoint.storage", "s3://ckpt/jobs"),
                "spec.checkpoint.s3.credentialsSecret", "S3_Keys"),
     "spec.checkpoint.s3.credentialsSecret"),
    ("negative user",
     with_field(minimal(), "spec.pod.securityContext", {"runAsUser": -1}),
     "spec.pod.securityContext.runAsUser"),
]


@pytest.mark.parametrize("document", [pytest.param(d, id=name) for name, d in ACCEPTED])
def test_the_api_server_accepts_what_the_parser_accepts(
        kube_rest: RestClient, kube_namespace: str, crd: None, document: dict[str, Any]) -> None:
    assert parser_complaint(document) is None
    assert create(kube_rest, kube_namespace, document) is None


@pytest.mark.parametrize(
    ("document", "message"), [pytest.param(d, m, id=name) for name, d, m in REFUSED])
def test_the_api_server_refuses_what_the_parser_refuses(
        kube_rest: RestClient, kube_namespace: str, crd: None, document: dict[str, Any],
        message: str) -> None:
    assert parser_complaint(document) is not None
    complaint = create(kube_rest, kube_namespace, document)
    assert complaint is not None and message in complaint, complaint


S3_JOB = with_field(minimal(), "spec.checkpoint.storage", "s3://ckpt/jobs")

OUT_OF_BOUNDS: list[tuple[str, dict[str, Any], str]] = [
    ("huge interval", with_field(minimal(), "spec.checkpoint.interval", "99999999999h"),
     "spec.checkpoint.interval"),
    ("huge min pause", with_field(minimal(), "spec.checkpoint.minPause", "8761h"),
     "must be at most 8760h"),
    ("huge backoff", with_field(minimal(), "spec.restartPolicy.backoff",
                                {"initial": "1s", "max": "99999999999h"}),
     "spec.restartPolicy.backoff.max"),
    ("huge start timeout", with_field(minimal(), "spec.restartPolicy.startTimeout", "9000h"),
     "must be at most 8760h"),
    ("maxRestarts above the bound", with_field(minimal(), "spec.restartPolicy.maxRestarts",
                                               10001),
     "spec.restartPolicy.maxRestarts"),
    ("maxRestarts 10^30", with_field(minimal(), "spec.restartPolicy.maxRestarts", 10**30),
     "spec.restartPolicy.maxRestarts"),
    ("tolerableFailures above the bound",
     with_field(minimal(), "spec.checkpoint.tolerableFailures", 10001),
     "spec.checkpoint.tolerableFailures"),
    ("multiplier above the bound",
     with_field(minimal(), "spec.restartPolicy.backoff.multiplier", 1000),
     "spec.restartPolicy.backoff.multiplier"),
    ("credentials in the endpoint",
     with_field(S3_JOB, "spec.checkpoint.s3", {"endpoint": "https://AKIA:s3cr3t@minio:9000"}),
     "must not contain credentials"),
]


@pytest.mark.parametrize(
    ("document", "message"), [pytest.param(d, m, id=name) for name, d, m in OUT_OF_BOUNDS])
def test_the_api_server_and_the_parser_refuse_out_of_bounds_values(
        kube_rest: RestClient, kube_namespace: str, crd: None, document: dict[str, Any],
        message: str) -> None:
    assert parser_complaint(document) is not None
    complaint = create(kube_rest, kube_namespace, document)
    assert complaint is not None and message in complaint, complaint


def test_the_api_server_does_not_repeat_credentials_found_in_the_endpoint(
        kube_rest: RestClient, kube_namespace: str, crd: None) -> None:
    document = with_field(S3_JOB, "spec.checkpoint.s3",
                          {"endpoint": "https://AKIA:s3cr3t@minio:9000"})
    complaint = create(kube_rest, kube_namespace, document)
    assert complaint is not None and "s3cr3t" not in complaint, complaint


@pytest.mark.parametrize(("path", "value"), [
    ("spec.checkpoint.interval", "8760h"),
    ("spec.restartPolicy.maxRestarts", 10000),
    ("spec.restartPolicy.backoff", {"initial": "1s", "max": "8760h", "multiplier": 100}),
])
def test_the_api_server_and_the_parser_accept_values_at_the_bounds(
        kube_rest: RestClient, kube_namespace: str, crd: None, path: str, value: Any) -> None:
    document = with_field(minimal(), path, value)
    assert parser_complaint(document) is None
    assert create(kube_rest, kube_namespace, document) is None
