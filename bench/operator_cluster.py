"""What the operator benchmark's two parts share (the reaction of one job, in
``operator_bench``, and the fleet of a thousand, in ``operator_fleet``): the
benchmark's name, the operator process, the namespace, fake nodes without kwok's
taint, the pods' timeline and phases as the cluster reports them, the jobs' creation,
and the operator's reconcile histogram read from its metrics text.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchmarkError, python_env
from e2e.controlplane.namespaces import resource_exists
from e2e.operator_process import JOBS_PATH, OperatorExited, OperatorProcess

NAME = "operator"
RECONCILE_SECONDS = "cjob_operator_reconcile_seconds"
KWOK_CAPACITY = {"cpu": "128", "memory": "1Ti", "pods": "110"}


def create_namespace(rest: Any, name: str) -> None:
    rest.request("POST", "/api/v1/namespaces",
                 body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_until(lambda: resource_exists(rest, f"/api/v1/namespaces/{name}/serviceaccounts/default"),
               what=f"service account default in {name}", timeout=60)


def wait_until(check: Callable[[], Any], *, what: str, timeout: float,
               interval: float = 0.2, benchmark: str = NAME,
               detail: Callable[[], str] | None = None) -> Any:
    """Poll ``check`` until it is truthy; a timeout is ``benchmark``'s error, with
    ``detail()`` (read only then, e.g. a log tail) appended to its message."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            extra = f"; {detail()}" if detail is not None else ""
            raise BenchmarkError(benchmark=benchmark, problem=f"timed out after "
                                 f"{timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


class OperatorRun(OperatorProcess):
    """The operator process of ``e2e``, whose failure to start is this benchmark's error."""

    def __init__(self, *, namespace: str, kubeconfig: Path, log_file: Path) -> None:
        super().__init__(namespace=namespace, kubeconfig=kubeconfig, log_file=log_file,
                         verbose=False, env=python_env())

    def start(self, *, timeout: float = 120.0) -> None:
        from e2e.controlplane.waiting import WaitTimeoutError

        try:
            super().start(timeout=timeout)
        except (OperatorExited, WaitTimeoutError) as exc:
            raise BenchmarkError(benchmark=NAME, problem=str(exc)) from None


@dataclass
class PodTimes:
    added: float | None = None
    running: float | None = None
    failed: float | None = None
    created_at: str | None = None
    finished_at: str | None = None


@dataclass
class PodTimeline:
    """When this process saw each pod of a namespace appear, run and fail.

    Fed by a watch on its own thread (the official client); times are this machine's
    ``time.monotonic()`` at the moment each event arrived.
    """

    api_client: Any
    namespace: str
    pods: dict[str, PodTimes] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-timeline", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self.api_client)
        version = ""
        while not self._stop.is_set():
            stream = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                events = stream.stream(  # type: ignore[no-untyped-call]
                    core.list_namespaced_pod, namespace=self.namespace,
                    resource_version=version, timeout_seconds=30, allow_watch_bookmarks=True,
                )  # fmt: skip
                for event in events:
                    seen = time.monotonic()
                    pod = event["raw_object"]
                    version = pod["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(pod, seen)
                    if self._stop.is_set():
                        stream.stop()  # type: ignore[no-untyped-call]
            except Exception as exc:  # re-list after an expired version or a dropped stream
                version = ""
                if self._stop.is_set():
                    return
                self.error = exc
                time.sleep(0.2)

    def _record(self, pod: dict[str, Any], seen: float) -> None:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        with self.changed:
            times = self.pods.setdefault(name, PodTimes())
            if times.added is None:
                times.added = seen
                times.created_at = pod["metadata"].get("creationTimestamp")
            if phase == "Running" and times.running is None:
                times.running = seen
            if phase == "Failed" and times.failed is None:
                times.failed = seen
                for status in (pod.get("status") or {}).get("containerStatuses") or []:
                    terminated = (status.get("state") or {}).get("terminated") or {}
                    times.finished_at = terminated.get("finishedAt")
            self.changed.notify_all()

    def wait(self, name: str, what: str, *, timeout: float) -> float:
        """The time ``what`` (added/running/failed) was seen for pod ``name``."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                value = getattr(self.pods.get(name) or PodTimes(), what)
                if value is not None:
                    return float(value)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BenchmarkError(benchmark=NAME, problem=f"pod {name} not {what} "
                                         f"after {timeout:.0f}s (watch error: {self.error!r})")
                self.changed.wait(timeout=min(remaining, 1.0))


def add_untainted_fake_nodes(kwok: Any, *, count: int,
                             capacity: dict[str, str] | None = None) -> list[str]:
    """Fake nodes without kwok's NoSchedule taint, so untolerating pods may land there."""
    names = [f"kwok-node-{i}" for i in range(count)]
    for name in names:
        kwok.add_node(name=name, capacity=dict(capacity or KWOK_CAPACITY), wait=True)
        kwok.client.request("PATCH", f"/api/v1/nodes/{name}",
                            body={"spec": {"taints": None}},
                            content_type="application/merge-patch+json")  # fmt: skip
    return names


def count_phases(rest: Any, namespace: str) -> dict[str, int]:
    """Jobs by phase, plus ``restarted``: jobs past their first attempt."""
    counts: dict[str, int] = {}
    for job in rest.get(JOBS_PATH.format(namespace=namespace))["items"]:
        status = job.get("status") or {}
        phase = status.get("phase") or "New"
        counts[phase] = counts.get(phase, 0) + 1
        if int(status.get("attempt") or 0) > 1:
            counts["restarted"] = counts.get("restarted", 0) + 1
    return counts


def failure_reasons(rest: Any, namespace: str) -> dict[str, int]:
    """How many jobs ended an attempt, by the reason of their last failure."""
    reasons: dict[str, int] = {}
    for job in rest.get(JOBS_PATH.format(namespace=namespace))["items"]:
        failure = (job.get("status") or {}).get("lastFailure") or {}
        if failure:
            reason = str(failure.get("reason"))
            reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


@dataclass
class JobCreation:
    """Creates the scale part's jobs one after another on a thread of its own, as a
    user's script would, while the main thread samples the operator."""

    rest: Any
    namespace: str
    jobs: int
    storage: str
    build: Callable[[int], dict[str, Any]]
    created: int = 0
    seconds: float = float("nan")
    error: BaseException | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="create-jobs", daemon=True).start()

    def _run(self) -> None:
        began = time.monotonic()
        try:
            for i in range(self.jobs):
                self.rest.request("POST", JOBS_PATH.format(namespace=self.namespace),
                                  body=self.build(i))
                self.created += 1
        except BaseException as exc:
            self.error = exc
        self.seconds = time.monotonic() - began

    def check(self) -> None:
        if self.error is not None:
            raise BenchmarkError(benchmark=NAME, problem=f"creating jobs failed: {self.error}")


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')


def _samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels") or ""))
        yield match.group("name"), labels, float(match.group("value"))


def sum_samples(text: str, name: str) -> float:
    return sum(value for sample, _, value in _samples(text) if sample == name)


def parse_histogram(text: str, name: str) -> dict[str, Any]:
    """A Prometheus histogram from exposition text: cumulative buckets, sum and count."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for sample, labels, value in _samples(text):
        if sample == f"{name}_bucket":
            buckets.append((float(labels["le"]), value))
        elif sample == f"{name}_sum":
            total = value
        elif sample == f"{name}_count":
            count = value
    buckets.sort()
    return {"buckets": buckets, "sum": total, "count": count}


def histogram_quantile(q: float, histogram: dict[str, Any]) -> float:
    """PromQL's ``histogram_quantile``: linear interpolation inside the bucket."""
    buckets: list[tuple[float, float]] = histogram["buckets"]
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower_bound
            if cumulative == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                cumulative - lower_count)
        lower_bound, lower_count = bound, cumulative
    return buckets[-1][0]
