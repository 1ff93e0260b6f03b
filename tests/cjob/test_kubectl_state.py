"""``kubectl cjob state``'s reading pod: built like the job's driver, so it reaches the
storage as the driver does, and nothing more (no API token, none of the operator's
files)."""

from __future__ import annotations

from typing import Any

import pytest
from cjob_operator.builders import build_driver_pod
from cjob_operator.config import OperatorConfig
from operator_world import make_job

from cjob.cluster_access import PluginError
from cjob.kubectl_state import reader_command, reader_pod

CODE = {"name": "code", "configMap": {"name": "job-code"}}
PVC = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}
POD = {"volumes": [CODE, PVC],
       "volumeMounts": [{"name": "code", "mountPath": "/opt/job"},
                        {"name": "ckpt", "mountPath": "/ckpt"}],
       "envFrom": [{"secretRef": {"name": "kafka"}}],
       "tolerations": [{"key": "pool", "operator": "Exists"}]}


def built(**kwargs: Any) -> dict[str, Any]:
    job = make_job(pod=POD, job={"entrypoint": "job:build",
                                 "pythonPath": ["/opt/job", "s3://code/job.zip"]})
    assert job.spec.image is not None
    driver = build_driver_pod(job, attempt=3, restore_pointer="latest", image=job.spec.image,
                              operator_config=OperatorConfig())
    document = {"metadata": {"name": "clicks"},
                "spec": {"job": {"pythonPath": ["/opt/job", "s3://code/job.zip"]}}}
    defaults: dict[str, Any] = {"operator": "per-user", "state": None}
    return reader_pod(driver=driver, job=document, pod_name="clicks-state-abc123",
                      checkpoint="s3://ckpt/jobs/clicks-u1/chk-9/_metadata",
                      deadline_seconds=300, **{**defaults, **kwargs})


def test_the_reading_pod_runs_the_state_command_in_the_drivers_image_and_storage() -> None:
    pod = built()
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "job_runtime", "state"]
    args = container["args"]
    assert args[args.index("--checkpoint") + 1] == "s3://ckpt/jobs/clicks-u1/chk-9/_metadata"
    assert args[args.index("--operator") + 1] == "per-user"
    assert args[args.index("--output") + 1] == "json" and "--state" not in args
    # The job's code for the classes its state holds; an S3 archive is the driver's to fetch.
    assert args[args.index("--python-path") + 1] == "/opt/job" and "s3://code/job.zip" not in args
    assert container["image"] == "example.org/clicks:1.0"
    assert container["envFrom"] == POD["envFrom"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/opt/job", "/ckpt"}
    assert {v["name"] for v in pod["spec"]["volumes"]} == {"code", "ckpt"}
    assert pod["spec"]["tolerations"] == POD["tolerations"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_reading_pod_has_no_api_access_and_says_whose_it_is() -> None:
    pod = built(operator=None, state=None)
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod["spec"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] == 300
    assert pod["metadata"]["labels"] == {"checkpointed.io/job": "clicks",
                                         "checkpointed.io/role": "state"}
    assert "--operator" not in pod["spec"]["containers"][0]["args"]


def test_a_driver_whose_command_is_not_the_runtimes_is_refused() -> None:
    with pytest.raises(PluginError, match="does not end with 'run'"):
        reader_command({"command": ["sh", "-c", "start"]})
