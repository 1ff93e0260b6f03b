"""``spec.pod``: driver placement and volumes, and whether file:// checkpoints survive a pod."""

from __future__ import annotations

from typing import Any

import pytest
from spec_documents import minimal, with_field

from cjob_spec import SpecError, parse_job, spec_hash
from cjob_spec.model import ephemeral_storage_problem

PVC = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}


def job_with(storage: str, pod: dict[str, Any] | None = None) -> Any:
    document = with_field(minimal(), "spec.checkpoint.storage", storage)
    if pod is not None:
        document = with_field(document, "spec.pod", pod)
    return parse_job(document)


# --- reading ----------------------------------------------------------------------------


def test_pod_settings_are_read_as_given() -> None:
    pod = {"volumes": [PVC], "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
           "nodeSelector": {"pool": "spark"},
           "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
           "affinity": {"nodeAffinity": {}}, "priorityClassName": "batch"}
    settings = job_with("file:///ckpt", pod).spec.pod
    assert settings.document() == pod
    assert settings.mount_holding("/ckpt/jobs/a") == pod["volumeMounts"][0]
    assert settings.mount_holding("/ckptx") is None


def test_no_pod_settings_leave_the_spec_hash_of_existing_jobs_unchanged() -> None:
    plain = job_with("s3://ckpt/jobs")
    assert plain.spec.pod.is_default
    assert spec_hash(job_with("s3://ckpt/jobs", {})) == spec_hash(plain)
    assert spec_hash(job_with("s3://ckpt/jobs", {"nodeSelector": {"pool": "x"}})) != spec_hash(plain)


@pytest.mark.parametrize(
    ("pod", "field", "problem"),
    [
        ({"volumeMounts": [{"name": "nope", "mountPath": "/x"}]},
         "spec.pod.volumeMounts[0].name", "no volume named 'nope'"),
        ({"volumes": [PVC], "volumeMounts": [{"name": "ckpt", "mountPath": "data"}]},
         "spec.pod.volumeMounts[0].mountPath", "absolute path"),
        ({"volumes": [PVC], "volumeMounts": [{"name": "ckpt", "mountpath": "/x"}]},
         "spec.pod.volumeMounts[0].mountpath", "unknown field"),
        ({"volumes": [{"name": "v"}]}, "spec.pod.volumes[0]", "exactly one volume source"),
        ({"volumes": [PVC, PVC]}, "spec.pod.volumes[1].name", "declared twice"),
        ({"volumes": [{"name": "Bad_Name", "emptyDir": {}}]}, "spec.pod.volumes[0].name",
         "DNS label"),
        ({"tolerations": [{"kye": "x"}]}, "spec.pod.tolerations[0].kye", "unknown field"),
        ({"tolerations": {"key": "x"}}, "spec.pod.tolerations", "must be a list"),
        ({"nodeSelector": {"pool": 3}}, "spec.pod.nodeSelector.pool", "must be strings"),
        ({"affinity": {"nodeAfinity": {}}}, "spec.pod.affinity.nodeAfinity", "unknown field"),
        ({"volumz": []}, "spec.pod.volumz", "unknown field"),
    ],
)
def test_bad_pod_settings_are_refused_naming_the_field(
        pod: dict[str, Any], field: str, problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        job_with("s3://ckpt/jobs", pod)
    assert caught.value.field == field
    assert problem in str(caught.value)


# --- do file:// checkpoints outlive the driver pod? --------------------------------------


def test_s3_storage_needs_no_volume() -> None:
    assert ephemeral_storage_problem(job_with("s3://ckpt/jobs").spec) is None


def test_file_storage_without_a_volume_is_lost_with_the_pod() -> None:
    problem = ephemeral_storage_problem(job_with("file:///ckpt").spec)
    assert problem is not None and "inside the driver container" in problem


@pytest.mark.parametrize("volume", [
    PVC,
    {"name": "ckpt", "hostPath": {"path": "/srv/ckpt"}},
    {"name": "ckpt", "nfs": {"server": "nfs.example", "path": "/exports"}},
])
def test_file_storage_under_a_persistent_mount_is_kept(volume: dict[str, Any]) -> None:
    pod = {"volumes": [volume], "volumeMounts": [{"name": "ckpt", "mountPath": "/data"}]}
    assert ephemeral_storage_problem(job_with("file:///data/ckpt", pod).spec) is None


def test_file_storage_on_an_empty_dir_is_lost_with_the_pod() -> None:
    pod = {"volumes": [{"name": "scratch", "emptyDir": {}}],
           "volumeMounts": [{"name": "scratch", "mountPath": "/data"}]}
    problem = ephemeral_storage_problem(job_with("file:///data/ckpt", pod).spec)
    assert problem is not None and "emptyDir" in problem


def test_file_storage_beside_a_mount_is_not_on_it() -> None:
    pod = {"volumes": [PVC], "volumeMounts": [{"name": "ckpt", "mountPath": "/data"}]}
    assert ephemeral_storage_problem(job_with("file:///database/ckpt", pod).spec) is not None


def test_file_storage_on_a_read_only_mount_is_refused() -> None:
    pod = {"volumes": [PVC],
           "volumeMounts": [{"name": "ckpt", "mountPath": "/data", "readOnly": True}]}
    problem = ephemeral_storage_problem(job_with("file:///data", pod).spec)
    assert problem is not None and "read-only" in problem
