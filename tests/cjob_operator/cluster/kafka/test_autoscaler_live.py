"""``spec.autoscaler`` on a real API server, with the operator running the job's driver
on the process node and a real Kafka broker: a backlog of clicks builds while one
subtask reads them, the operator reads the driver's metrics, applies a larger
parallelism through a Snapshot upgrade, the job drains the backlog, and once it keeps
up the operator scales it down again. Every click is counted exactly once throughout.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from operator_live import JobWatcher, Kubectl, OperatorProcess

from e2e.controlplane.waiting import wait_for
from e2e.jobs import RUNTIME_IMAGE
from e2e.kafka.clients import create_topic
from e2e.repo import REPO_ROOT

EXAMPLE_DIR = REPO_ROOT / "examples" / "kafka_clicks"
CLICKS = 5_000
USERS = 30
DELAY = 0.02
"""Seconds per click in a subtask: one subtask reads 50 a second, far behind the backlog."""


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"autoscaled_clicks_{name}",
                                                  EXAMPLE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def clicks_job(*, namespace: str, bootstrap: str, clicks: str, counts: str,
               work_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "checkpointed.io/v1alpha1", "kind": "CheckpointedJob",
        "metadata": {"name": "clicks", "namespace": namespace},
        "spec": {
            "image": RUNTIME_IMAGE,
            "job": {"entrypoint": "job:build", "pythonPath": [str(EXAMPLE_DIR)],
                    "args": {"bootstrap": bootstrap, "input": clicks, "output": counts,
                             "delay": DELAY}},
            "parallelism": 1,
            "maxParallelism": 8,
            "spark": {"master": "local[4]", "driver": {"cores": 1, "memory": "1Gi"}},
            "checkpoint": {"storage": (work_dir / "checkpoints").as_uri(), "interval": "2s"},
            "upgradeMode": "Snapshot",
            "restartPolicy": {"type": "OnFailure", "maxRestarts": 3,
                              "backoff": {"initial": "1s", "max": "5s"}},
            "autoscaler": {"mode": "Apply", "min": 1, "max": 4, "targetLag": "20s",
                           "targetUtilization": 1.0, "stabilization": "15s"},
            "cleanupPolicy": {"checkpoints": "Delete"},
        },
    }


def test_a_backlog_scales_the_job_up_a_drained_one_down_and_every_click_counts_once(
    kubectl: Kubectl, kube_rest: Any, kube_namespace: str, process_node: Any,
    cjob_operator: OperatorProcess, kafka_broker: Any, tmp_path: Path,
) -> None:
    produce, verify = _example("produce"), _example("verify")
    bootstrap = kafka_broker.bootstrap
    clicks = create_topic(bootstrap=bootstrap, partitions=4)
    counts = create_topic(bootstrap=bootstrap, partitions=4)
    produce.produce(bootstrap, clicks, produce.clicks(count=CLICKS, users=USERS))
    assert kubectl.apply(clicks_job(namespace=kube_namespace, bootstrap=bootstrap,
                                    clicks=clicks, counts=counts, work_dir=tmp_path)
                         ).returncode == 0
    job = JobWatcher(rest=kube_rest, namespace=kube_namespace, name="clicks",
                     operator=cjob_operator)

    # Behind at one subtask: its capacity is measured, more subtasks are recommended
    # (the whole backlog of the four partitions within 20 s asks for more than two
    # at 10-60 clicks a second; four is the next divisor of the eight key groups and
    # the maximum), applied once held, then run.
    up = job.until(lambda s: (s.get("autoscaler") or {}).get("parallelism", 1) > 1,
                   what="the autoscaler to scale up", timeout=240)
    scaled = up["autoscaler"]
    print("scaled up:", scaled)
    wider = scaled["parallelism"]
    assert wider == 4, scaled
    assert scaled["reason"] == "ScaleUp" and scaled["specParallelism"] == 1, scaled
    assert 10 <= scaled["capacityPerSubtask"] <= 60, scaled  # DELAY: at most 50 a second
    assert scaled["lagRecords"] > 0
    job.until(lambda s: s.get("parallelism") == wider and s.get("phase") == "Running",
              what=f"an attempt running at {wider}", timeout=180)
    spec = job.get()["spec"]  # type: ignore[index]
    assert spec["parallelism"] == 1, "the user's spec is left alone"

    # Drained, it keeps up: the capacity measured when behind says one is enough.
    down = job.until(lambda s: (s.get("autoscaler") or {}).get("parallelism") == 1,
                     what="the autoscaler to scale back to 1", timeout=300)
    print("scaled down:", down["autoscaler"])
    assert down["autoscaler"]["reason"] == "ScaleDown", down["autoscaler"]
    job.until(lambda s: s.get("parallelism") == 1 and s.get("phase") == "Running",
              what="an attempt running at 1 again", timeout=180)
    reasons = job.event_reasons()
    assert reasons.count("ScalingApplied") == 2, reasons
    assert "ScalingRecommended" in reasons

    # Every click counted once, through both upgrades (read_committed), once the
    # attempt at 1 committed its first checkpoint.
    values = wait_for(lambda: (found := verify.read_values(bootstrap, counts))
                      and len(found) >= CLICKS and found, what="every count committed",
                      timeout=120)
    read = verify.read_values(bootstrap, clicks)
    assert len(read) == CLICKS
    assert len(values) == CLICKS, "one count per click, none repeated or lost"
    assert verify.verify(read, values) == []
