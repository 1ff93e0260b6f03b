"""CheckpointedJobs for scenarios on the local control plane (tests and benchmarks).

Driver pods of these jobs run on the process node, so paths in them (the example's
code, output and ``file://`` checkpoints) are paths of this machine.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from e2e.repo import REPO_ROOT

RUNNING_SUM_DIR = REPO_ROOT / "examples" / "running_sum"
KAFKA_CLICKS_DIR = REPO_ROOT / "examples" / "kafka_clicks"
RUNTIME_IMAGE = "checkpointed-jobs/runtime:0.1.0"


@functools.cache
def kafka_clicks_module(name: str) -> ModuleType:
    """``examples/kafka_clicks/<name>.py`` (``produce``, ``verify``) as the module
    ``kafka_clicks_<name>``: the running sum has a ``verify`` module too, and a test
    may use both."""
    spec = importlib.util.spec_from_file_location(f"kafka_clicks_{name}",
                                                  KAFKA_CLICKS_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def running_sum_job(
    *,
    name: str,
    namespace: str,
    work_dir: Path,
    count: int,
    rate: int,
    parallelism: int = 2,
    entrypoint: str = "job:build",
    storage: str | None = None,
    s3: dict[str, Any] | None = None,
    max_restarts: int = 3,
    backoff: tuple[str, str] = ("1s", "5s"),
    cleanup: str = "Delete",
) -> dict[str, Any]:
    """The running-sum example as a CheckpointedJob, Spark in local mode in the driver pod.

    It writes under ``work_dir`` (``output/``, and ``checkpoints/`` unless ``storage``
    names other storage) and checkpoints every second.
    """
    checkpoint: dict[str, Any] = {
        "storage": storage or (work_dir / "checkpoints").as_uri(),
        "interval": "1s",
        "retained": 3,
    }
    if s3 is not None:
        checkpoint["s3"] = s3
    initial, most = backoff
    return {
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": RUNTIME_IMAGE,
            "job": {
                "entrypoint": entrypoint,
                "pythonPath": [str(RUNNING_SUM_DIR)],
                "args": {"output": str(work_dir / "output"), "count": count, "rate": rate},
            },
            "parallelism": parallelism,
            "spark": {"master": f"local[{parallelism}]",
                      "driver": {"cores": 1, "memory": "1Gi"}},
            "checkpoint": checkpoint,
            "restartPolicy": {
                "type": "OnFailure",
                "maxRestarts": max_restarts,
                "backoff": {"initial": initial, "max": most},
            },
            "cleanupPolicy": {"checkpoints": cleanup},
        },
    }
