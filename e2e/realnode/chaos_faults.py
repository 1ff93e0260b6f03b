"""Chaos on a real node: faults picked at random (from a seed), carried out one at a time.

A long run kills, every 20 to 60 seconds, one of: the active driver's container, an
executor's, the warm standby's, the operator's, or the S3 server's; with a second,
Kafka job in the run, also that job's driver (``kafka-driver``) or the Kafka broker's
container (``kafka``). Containers are killed with SIGKILL through containerd, as a
crash or the OOM killer would end them; the kubelet then restarts those of
restartable pods (the operator's, the S3 server's and the broker's, whose
``emptyDir`` data outlives its container) and reports the driver pods, which never
restart, for the operator to replace.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from e2e.controlplane.rest import RestClient, quote
from e2e.realnode import scenario
from e2e.realnode.cluster_s3 import ClusterS3

KINDS = ("driver", "executor", "standby", "operator", "s3", "kafka-driver", "kafka")
"""What the chaos kills, one at a time (the last two only with a Kafka job in the run)."""
DRIVER_KINDS = frozenset({"driver", "kafka-driver"})
KAFKA_KINDS = frozenset({"kafka-driver", "kafka"})
"""Faults whose recovery is the Kafka job's, not the main job's."""

ATTEMPT_LABEL = "checkpointed.io/attempt"

Ctr = Callable[..., Any]


@dataclass(frozen=True)
class Fault:
    """One kill: what, when (monotonic and wall clock), and the job as it stood then."""

    kind: str
    pod: str
    at: float
    wall: float
    attempt: int | None
    """The attempt of the killed driver pod (its label); ``None`` for other kinds."""

    @property
    def job_kind(self) -> str:
        """``kafka`` for a fault the Kafka job recovers from, else ``main``."""
        return "kafka" if self.kind in KAFKA_KINDS else "main"


def _container_running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and "running" in (statuses[0].get("state") or {}) and bool(
        statuses[0].get("containerID"))


def _live(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods whose container runs now and that nobody is deleting: what can be killed."""
    return [p for p in pods if p["status"].get("phase") == "Running"
            and "deletionTimestamp" not in p["metadata"] and _container_running(p)]


def _pods(rest: RestClient, *, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    query = {"labelSelector": selector} if selector else None
    items: list[dict[str, Any]] = rest.get(f"/api/v1/namespaces/{quote(namespace)}/pods",
                                           query=query)["items"]
    return items


def _driver(job: scenario.JobHandle) -> list[dict[str, Any]]:
    """The job's active driver pod, if its container runs now."""
    name = (job.get() or {}).get("status", {}).get("driverPod")
    pod = job.pod(name) if name else None
    # The status may still name a promoted standby's old role for a moment.
    if pod is None or pod["metadata"]["labels"].get("checkpointed.io/role") != "driver":
        return []
    return _live([pod])


@dataclass
class Chaos:
    """Picks a fault at random every ``min_gap`` to ``max_gap`` seconds and carries it out.

    The kind is drawn among those with something to kill at that moment (a standby
    being replaced, say, cannot be killed), so that every draw is a real fault; a
    seed makes a run's draws repeatable as far as the cluster's timing allows.
    """

    seed: int
    job: scenario.JobHandle
    ctr: Ctr
    operator_namespace: str
    s3: ClusterS3
    kafka_job: scenario.JobHandle | None = None
    """A second job, Kafka to Kafka, whose driver the chaos kills too."""
    kafka_namespace: str | None = None
    """Where the broker runs, when the chaos kills it too."""
    min_gap: float = 20.0
    max_gap: float = 60.0
    log: Callable[[str], None] = print
    faults: list[Fault] = field(default_factory=list)
    missed: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def targets(self, kind: str) -> list[dict[str, Any]]:
        """The pods a fault of ``kind`` could kill now."""
        rest = self.job.rest
        if kind == "driver":
            return _driver(self.job)
        if kind == "kafka-driver":
            return _driver(self.kafka_job) if self.kafka_job is not None else []
        if kind in ("executor", "standby"):
            return _live(self.job.pods(kind))
        if kind == "operator":
            return _live(_pods(rest, namespace=self.operator_namespace))
        if kind == "s3":
            return _live(_pods(rest, namespace=self.s3.namespace,
                               selector="app.kubernetes.io/name=s3"))
        if kind == "kafka":
            if self.kafka_namespace is None:
                return []
            return _live(_pods(rest, namespace=self.kafka_namespace,
                               selector="app.kubernetes.io/name=kafka"))
        raise ValueError(f"unknown kind of fault {kind!r}")

    def strike(self) -> Fault | None:
        """Kill one pod's container, of a kind drawn at random among those possible."""
        candidates = {kind: self.targets(kind) for kind in KINDS}
        possible = [kind for kind in KINDS if candidates[kind]]
        if not possible:
            self.missed["nothing to kill"] += 1
            return None
        kind = self._random.choice(possible)
        pod = self._random.choice(sorted(candidates[kind], key=lambda p: p["metadata"]["name"]))
        name = pod["metadata"]["name"]
        attempt_label = pod["metadata"].get("labels", {}).get(ATTEMPT_LABEL)
        at, wall = time.monotonic(), time.time()
        try:
            scenario.kill_container(self.ctr, pod)
        except AssertionError as exc:  # the container ended between the reading and the kill
            self.missed[kind] += 1
            self.log(f"chaos: could not kill {kind} {name}: {exc}")
            return None
        fault = Fault(kind=kind, pod=name, at=at, wall=wall,
                      attempt=int(attempt_label) if kind in DRIVER_KINDS and attempt_label
                      else None)
        self.faults.append(fault)
        self.log(f"chaos: +{len(self.faults)} killed {kind} {name}"
                 + (f" (attempt {fault.attempt})" if fault.attempt else ""))
        return fault

    def run(self, *, seconds: float, done: Callable[[], bool]) -> float:
        """Strike until ``seconds`` have passed or ``done()``; returns the time it ran
        (``seconds``, unless the job ended first)."""
        started = time.monotonic()
        deadline = started + seconds
        while not done():
            wake = time.monotonic() + self._random.uniform(self.min_gap, self.max_gap)
            while time.monotonic() < min(wake, deadline) and not done():
                time.sleep(min(1.0, max(0.0, min(wake, deadline) - time.monotonic())))
            if time.monotonic() >= deadline or done():
                break
            self.strike()
        return time.monotonic() - started

