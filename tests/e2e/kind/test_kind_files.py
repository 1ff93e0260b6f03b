"""The kind scenario's inputs, checked without Docker: the script parses, the manifests
are valid, and the CheckpointedJob it applies passes the project's own validation."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml
from paths import REPO

from cjob_spec import parse_job

HERE = REPO / "e2e" / "kind"
PLACEHOLDERS = {
    "NAMESPACE": "cjob-e2e",
    "RUNTIME_IMAGE": "checkpointed-jobs/runtime:e2e",
    "MINIO_IMAGE": "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z",
    "COUNT": "200000",
    "RATE": "5000",
}


def rendered(name: str) -> list[dict[str, Any]]:
    """A manifest with its placeholders filled in, as run.sh does."""
    text = (HERE / "manifests" / name).read_text()
    for key, value in PLACEHOLDERS.items():
        text = text.replace("${" + key + "}", value)
    assert "${" not in re.sub(r"#.*", "", text), f"unfilled placeholder in {name}"
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_the_scenario_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(HERE / "run.sh")], check=True)


def test_the_script_fills_every_placeholder_the_manifests_use() -> None:
    script = (HERE / "run.sh").read_text()
    used: set[str] = set()
    for path in (HERE / "manifests").glob("*.yaml"):
        body = re.sub(r"#.*", "", path.read_text())
        used |= set(re.findall(r"\$\{([A-Z_]+)\}", body))
    for name in used:
        assert f"\\${{{name}}}" in script, f"run.sh does not fill ${{{name}}}"


def test_the_scenarios_job_is_a_valid_checkpointed_job_with_s3_storage() -> None:
    (document,) = rendered("running-sum.yaml")
    job = parse_job(document)
    assert job.spec.checkpoint.storage.startswith("s3://")
    assert job.spec.checkpoint.s3 is not None
    assert job.spec.checkpoint.s3.credentials_secret == "minio-creds"
    assert job.spec.job.args["output"].startswith("s3://cjob-output/")


def test_minio_offers_the_credentials_the_job_and_the_operator_expect() -> None:
    objects = {doc["kind"]: doc for doc in rendered("minio.yaml")}
    assert set(objects) == {"Secret", "Deployment", "Service", "Job"}
    secret = objects["Secret"]["stringData"]
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(secret)
    assert secret["AWS_ACCESS_KEY_ID"] == secret["MINIO_ROOT_USER"]
    assert secret["AWS_SECRET_ACCESS_KEY"] == secret["MINIO_ROOT_PASSWORD"]
    (job,) = rendered("running-sum.yaml")
    assert job["spec"]["checkpoint"]["s3"]["endpoint"] == "http://minio.cjob-e2e.svc:9000"
    port = objects["Service"]["spec"]["ports"][0]["port"]
    assert job["spec"]["checkpoint"]["s3"]["endpoint"].endswith(f":{port}")


def test_the_verifier_job_runs_the_examples_verifier_on_the_same_record_count() -> None:
    (verify,) = rendered("verify-output.yaml")
    script = verify["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "/opt/cjob/examples/running_sum/verify.py" in script
    assert "--count 200000" in script
    (job,) = rendered("running-sum.yaml")
    assert str(job["spec"]["job"]["args"]["count"]) == "200000"


def test_the_kind_cluster_has_a_worker_node() -> None:
    config = yaml.safe_load((HERE / "cluster.yaml").read_text())
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker"]
