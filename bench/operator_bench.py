"""Benchmark 6: the operator's reaction to a failed driver, alone and among 1,000 jobs.

Everything runs against the local control plane (a real kube-apiserver, etcd,
scheduler and controller-manager built from Go modules; ``e2e/controlplane``) and the
operator as a real process (``python -m cjob_operator``), exactly as the Helm chart
starts it.

**Reaction, one job.** One CheckpointedJob with restart backoff 0 runs its driver
pods on the process node. As soon as an attempt's pod is Running its process is
SIGKILLed; the operator must notice the Failed pod and create the next attempt's
pod. A watch (the official client) records when each pod was first seen and when it
was first seen Failed, on this machine's monotonic clock: *pod seen Failed -> next
attempt's pod seen created*. The node's own part (kill -> pod reported Failed) is
reported separately, as the baseline.

**Fleet, 1,000 jobs** (``--jobs``; ``--quick`` for a smoke run with 50;
``bench/operator_fleet.py``). The jobs are created one by one and their driver pods
scheduled on kwok's fake nodes, where nothing runs but the pods go Running. The
operator builds driver pods without tolerations or node selectors, so the fake nodes
are created without kwok's usual taint and the process node is removed first (no
change to the product). With every job Running, one operator is measured in two
windows: a steady one (``--steady-seconds``, longer than a resync period), then one
in which ``--failures`` drivers of different jobs are failed one after another while
the others keep running. kwok plays the kubelet of the fake nodes, so a driver is
failed the way a kubelet reports it: its pod's ``status`` subresource is patched to
phase ``Failed`` with the driver container terminated, exit code 137. Measured: the
reaction (as above) p50/p99 over those failures, the operator's resident memory
(``VmRSS``, ``VmHWM``), its reconcile passes, and the apiserver requests it causes,
per job and minute. Requests are counted by the apiserver, not by the operator: the
operator runs with a client identity of its own (user ``cjob-operator``), and the
apiserver audits that user's requests at ``Metadata`` level (every other user at
``None``), one JSON line per finished request (``e2e/controlplane/audit.py``); a
window's count is the lines written between its start and its end. With
``--baseline-ref`` the same fleet is then measured again by the operator package of
that commit (before/after in one run, on the same cluster and jobs).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    BenchmarkError,
    fresh_dir,
    percentile,
    plot_path,
    print_table,
    pyplot,
    python_env,
    remove_dir,
    target_entry,
    update_summary,
    write_result,
)
from e2e.controlplane.namespaces import resource_exists
from e2e.jobs import running_sum_job
from e2e.operator_process import JOBS_PATH, OperatorExited, OperatorProcess

NAME = "operator"
REACTION_JOB = "react"
REACTION_TARGET_SECONDS = 1.0
RSS_TARGET_MB = 250.0
RECONCILE_SECONDS = "cjob_operator_reconcile_seconds"
QUICK_JOBS, QUICK_FAILURES, QUICK_STEADY_SECONDS, QUICK_REPEAT = 50, 10, 70.0, 5
KWOK_CAPACITY = {"cpu": "128", "memory": "1Ti", "pods": "110"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=20,
                        help="driver failures measured for the reaction time (default 20)")
    parser.add_argument("--jobs", type=int, default=1000,
                        help="CheckpointedJobs of the fleet part (default 1000)")
    parser.add_argument("--kwok-nodes", type=int, default=2,
                        help="fake nodes the fleet's driver pods go to (default 2)")
    parser.add_argument("--failures", type=int, default=60,
                        help="drivers of different jobs failed one by one with the fleet "
                        "Running (default 60)")
    parser.add_argument("--steady-seconds", type=float, default=150.0,
                        help="length of the steady window requests are counted in "
                        "(default 150: longer than one resync period)")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="window (default 10 s) in which a settled operator runs no more "
                        "passes than its resyncs")
    parser.add_argument("--baseline-ref", default=None,
                        help="also measure the fleet with the operator package of this git "
                        "commit (before/after in one run)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds the fleet may take to get every job Running "
                        "(default 120 + 1 per job)")
    parser.add_argument("--skip-scale", action="store_true", help="measure the reaction only")
    parser.add_argument("--quick", action="store_true",
                        help="smoke scale: 50 jobs, 10 failures, 70 s steady window, 5 "
                        "reactions on the process node")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the operator logs under bench/work (kept anyway on failure)")


# --------------------------------------------------------------------- cluster pieces


def start_control_plane() -> Any:
    from e2e.controlplane.audit import OPERATOR_USER
    from e2e.controlplane.binaries import CONTROL_PLANE_BINARIES, ensure_binaries
    from e2e.controlplane.controlplane import ControlPlane

    bin_dir = ensure_binaries(names=(*CONTROL_PLANE_BINARIES, "kwok"), build=True)
    plane = ControlPlane(bin_dir=bin_dir, audited_users=(OPERATOR_USER,))
    plane.start()
    return plane


def install_crd(rest: Any) -> None:
    """The CheckpointedJob CRD, served (a timeout is this benchmark's error)."""
    from e2e.controlplane.waiting import WaitTimeoutError
    from e2e.operator_process import install_crd as install

    try:
        install(rest)
    except WaitTimeoutError as exc:
        raise BenchmarkError(benchmark=NAME, problem=str(exc)) from None


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


# --------------------------------------------------------------------- pod timeline


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


# --------------------------------------------------------------------- reaction


def kill_when_possible(node: Any, *, namespace: str, name: str, timeout: float = 10.0) -> float:
    """SIGKILL the pod's process (retrying until the node has started it); the kill time."""
    deadline = time.monotonic() + timeout
    while True:
        killed_at = time.monotonic()
        with contextlib.suppress(KeyError, LookupError):
            if node.kill_pod_process(namespace=namespace, name=name) > 0:
                return killed_at
        if time.monotonic() > deadline:
            raise BenchmarkError(benchmark=NAME, problem=f"no process of {name} to kill")
        time.sleep(0.02)


def measure_reaction(*, plane: Any, node: Any, work: Path, repeat: int) -> dict[str, Any]:
    namespace = "bench-reaction"
    rest = plane.admin_rest()
    create_namespace(rest, namespace)
    api_client = plane.new_api_client()
    timeline = PodTimeline(api_client=api_client, namespace=namespace)
    timeline.start()
    operator = OperatorRun(namespace=namespace, kubeconfig=plane.kubeconfig,
                           log_file=work / "operator-reaction.log")  # fmt: skip
    operator.start()
    kills: dict[int, float] = {}
    try:
        rest.request("POST", JOBS_PATH.format(namespace=namespace),
                     body=running_sum_job(name=REACTION_JOB, namespace=namespace,
                                          work_dir=work / "reaction", count=1_000_000,
                                          rate=100, parallelism=1, max_restarts=repeat + 10,
                                          backoff=("0s", "0s")))  # fmt: skip
        for attempt in range(1, repeat + 2):
            pod = f"{REACTION_JOB}-attempt-{attempt}"
            timeline.wait(pod, "running", timeout=120)
            if attempt == repeat + 1:
                break
            kills[attempt] = kill_when_possible(node, namespace=namespace, name=pod)
            timeline.wait(pod, "failed", timeout=60)
            timeline.wait(f"{REACTION_JOB}-attempt-{attempt + 1}", "added", timeout=60)
            print(f"  reaction {attempt}/{repeat}", flush=True)
        histogram = parse_histogram(operator.metrics(), RECONCILE_SECONDS)
    finally:
        operator.stop()
        timeline.stop()
        api_client.close()
    samples: list[dict[str, Any]] = []
    reaction: list[float] = []
    node_part: list[float] = []
    total: list[float] = []
    for attempt in range(1, repeat + 1):
        failed = timeline.pods[f"{REACTION_JOB}-attempt-{attempt}"]
        following = timeline.pods[f"{REACTION_JOB}-attempt-{attempt + 1}"]
        assert failed.failed is not None and following.added is not None
        reaction.append(following.added - failed.failed)
        node_part.append(failed.failed - kills[attempt])
        total.append(following.added - kills[attempt])
        samples.append({
            "attempt": attempt,
            "failed_to_created_s": reaction[-1],
            "kill_to_failed_s": node_part[-1],
            "kill_to_created_s": total[-1],
            "finished_at": failed.finished_at,
            "next_created_at": following.created_at,
        })  # fmt: skip
    return {
        "repeat": repeat,
        "backoff": "0s",
        "reaction_p50_s": percentile(reaction, 0.5),
        "reaction_p99_s": percentile(reaction, 0.99),
        "reaction_max_s": max(reaction),
        "kill_to_failed_p50_s": percentile(node_part, 0.5),
        "kill_to_created_p50_s": percentile(total, 0.5),
        "kill_to_created_p99_s": percentile(total, 0.99),
        "reconcile_p50_s": histogram_quantile(0.5, histogram),
        "reconcile_p99_s": histogram_quantile(0.99, histogram),
        "reconcile_passes": histogram["count"],
        "samples": samples,
    }


# --------------------------------------------------------------------- scale


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


def remove_node(rest: Any, *, name: str) -> None:
    """Delete a Node and wait until it is gone, so the scheduler can no longer pick it."""
    from e2e.controlplane.rest import ApiError

    try:
        rest.request("DELETE", f"/api/v1/nodes/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise
    wait_until(lambda: not resource_exists(rest, f"/api/v1/nodes/{name}"),
               what=f"node {name} to be deleted", timeout=60)  # fmt: skip


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


# --------------------------------------------------------------------- Prometheus text


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


# --------------------------------------------------------------------- output


def ratio(after: float, before: float) -> float:
    return after / before if before else float("nan")


def plot(reaction: dict[str, Any], scale: dict[str, Any] | None) -> Path:
    plt = pyplot()
    panels = 3 if scale else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
    left = axes[0][0]
    samples = reaction["samples"]
    left.bar([s["attempt"] for s in samples], [s["failed_to_created_s"] * 1000 for s in samples],
             color="#4477aa", label="pod Failed -> next pod created")
    left.plot([s["attempt"] for s in samples], [s["kill_to_created_s"] * 1000 for s in samples],
              "o", color="#cc6677", label="kill -> next pod created")
    left.axhline(REACTION_TARGET_SECONDS * 1000, color="#999933", linestyle="--",
                 label="target (p99)")
    left.set_xlabel("failed attempt")
    left.set_ylabel("ms")
    left.set_title("Reaction, one job, process node")
    left.legend(fontsize=8)
    if scale:
        middle = axes[0][1]
        series = scale["ramp"]["series"]
        middle.plot([p["t"] for p in series], [p["rss_mb"] for p in series], color="#4477aa",
                    label="operator RSS (MiB)")
        middle.axhline(RSS_TARGET_MB, color="#999933", linestyle="--", label="RSS target")
        middle.set_ylim(0, max(RSS_TARGET_MB, *(p["rss_mb"] for p in series)) * 1.15)
        middle.set_xlabel("s since the first job was created")
        middle.set_ylabel("MiB")
        twin = middle.twinx()
        twin.plot([p["t"] for p in series], [p["created"] for p in series], color="#bbbbbb",
                  label="jobs created")
        twin.plot([p["t"] for p in series], [p["running"] for p in series], color="#cc6677",
                  label="jobs Running")
        twin.set_ylabel("jobs")
        middle.set_title(f"{scale['jobs']} jobs, one operator, kwok nodes")
        middle.legend(loc="upper left", fontsize=8)
        twin.legend(loc="lower right", fontsize=8)
        right = axes[0][2]
        for key, color in (("baseline", "#bbbbbb"), ("current", "#4477aa")):
            if scale.get(key):
                values = sorted(x["failed_to_created_s"] * 1000 for x in scale[key]["samples"])
                right.plot(range(1, len(values) + 1), values, "o-", color=color, markersize=3,
                           label=f"{key}: Failed -> next pod created")
        right.axhline(REACTION_TARGET_SECONDS * 1000, color="#999933", linestyle="--",
                      label="target (p99)")
        right.set_xlabel("failure (sorted)")
        right.set_ylabel("ms")
        right.set_title(f"Reaction with {scale['jobs']} jobs Running")
        right.legend(fontsize=8)
    fig.tight_layout()
    path = plot_path(NAME)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(reaction: dict[str, Any], scale: dict[str, Any] | None) -> None:
    rows: list[list[Any]] = [
        ["reaction p50, 1 job (Failed -> created)", reaction["reaction_p50_s"] * 1000, "ms",
         None, None],
        ["reaction p99, 1 job (Failed -> created)", reaction["reaction_p99_s"] * 1000, "ms",
         REACTION_TARGET_SECONDS * 1000, reaction["reaction_p99_s"] <= REACTION_TARGET_SECONDS],
        ["kill -> pod Failed p50 (node)", reaction["kill_to_failed_p50_s"] * 1000, "ms", None,
         None],
    ]  # fmt: skip
    if scale:
        jobs = scale["jobs"]
        ramp = scale["ramp"]
        rows += [
            [f"time to {jobs} Running", ramp["all_running_seconds"], "s", None, None],
            [f"operator RSS, {jobs} Running", ramp["rss_all_running_mb"], "MiB",
             RSS_TARGET_MB, ramp["rss_all_running_mb"] <= RSS_TARGET_MB],
            ["requests per job created (ramp)", ramp["requests"]["requests"] / jobs, "req",
             None, None],
        ]  # fmt: skip
        for key in ("current", "baseline"):
            run = scale.get(key)
            if not run:
                continue
            rows += [
                [f"{key}: reaction p50, {jobs} jobs", run["reaction_p50_s"] * 1000, "ms", None,
                 None],
                [f"{key}: reaction p99, {jobs} jobs", run["reaction_p99_s"] * 1000, "ms",
                 REACTION_TARGET_SECONDS * 1000,
                 run["reaction_p99_s"] <= REACTION_TARGET_SECONDS],
                [f"{key}: requests/job/min, steady",
                 run["steady_requests"]["per_job_per_minute"], "req", None, None],
                [f"{key}: requests/job/min, failing", run["failure_requests"]["per_job_per_minute"],
                 "req", None, None],
                [f"{key}: requests per failure", run["failure_requests"]["per_failure"], "req",
                 None, None],
                [f"{key}: operator RSS, steady", run["rss_steady_mb"], "MiB", RSS_TARGET_MB,
                 run["rss_steady_mb"] <= RSS_TARGET_MB],
            ]  # fmt: skip
    print_table("Benchmark 6: the operator", ["measure", "value", "unit", "target", "met"], rows)


def summary_entries(reaction: dict[str, Any], scale: dict[str, Any] | None) -> dict[str, Any]:
    p99 = reaction["reaction_p99_s"]
    entries: dict[str, Any] = {
        "operator_reaction_p99_seconds": target_entry(
            value=p99, target=REACTION_TARGET_SECONDS,
            unit="s from driver pod Failed to the next attempt's pod created (backoff 0)",
            met=p99 <= REACTION_TARGET_SECONDS, baseline=reaction["kill_to_failed_p50_s"],
            note=f"one job on the process node; p50 {reaction['reaction_p50_s'] * 1000:.0f} ms "
            f"over {reaction['repeat']} restarts; baseline: the node's own kill -> pod Failed"),
    }  # fmt: skip
    if not scale:
        return entries
    jobs = scale["jobs"]
    current = scale["current"]
    baseline = scale.get("baseline")
    ramp = scale["ramp"]
    fleet_p99 = current["reaction_p99_s"]
    entries["operator_fleet_reaction_p99_seconds"] = target_entry(
        value=fleet_p99, target=REACTION_TARGET_SECONDS,
        unit=f"s from driver pod Failed to the next attempt's pod created, {jobs} jobs Running",
        met=fleet_p99 <= REACTION_TARGET_SECONDS,
        baseline=baseline["reaction_p99_s"] if baseline else None,
        note=f"{current['failures']} drivers failed one by one (kwok, status patch); baseline: "
        f"the operator at {scale.get('baseline_ref')} on the same fleet")  # fmt: skip
    rss = ramp["rss_all_running_mb"]
    entries["operator_scale_rss_mb"] = target_entry(
        value=rss, target=RSS_TARGET_MB,
        unit=f"MiB resident memory of one operator with {jobs} jobs Running",
        met=rss <= RSS_TARGET_MB, baseline=ramp["rss_idle_mb"],
        note=f"baseline: the same operator idle; peak {ramp['rss_peak_mb']:.0f} MiB")
    steady = current["steady_requests"]["per_job_per_minute"]
    entries["operator_fleet_requests_per_job_minute"] = {
        **target_entry(
            value=steady, target=0.0,
            unit=f"apiserver requests per job per minute in steady state, {jobs} jobs "
            "(the apiserver's audit log)",
            met=None,
            baseline=baseline["steady_requests"]["per_job_per_minute"] if baseline else None,
            note=f"no target (measured); baseline: the operator at {scale.get('baseline_ref')}; "
            f"while failing drivers: {current['failure_requests']['per_job_per_minute']:.3f}"),
        "target": None,
    }  # fmt: skip
    return entries


def run(ns: argparse.Namespace) -> dict[str, Any]:
    from bench.operator_fleet import FleetSettings, measure_fleet
    from e2e.controlplane.process_node import ProcessNode

    began = time.monotonic()
    work = fresh_dir(NAME)
    plane = start_control_plane()
    scale: dict[str, Any] | None = None
    keep = bool(ns.keep_work)
    try:
        install_crd(plane.admin_rest())
        print(f"control plane up after {time.monotonic() - began:.0f}s", flush=True)
        node = ProcessNode(control_plane=plane)
        node.start()
        try:
            node.wait_until_ready(timeout=120)
            repeat = min(ns.repeat, QUICK_REPEAT) if ns.quick else ns.repeat
            reaction = measure_reaction(plane=plane, node=node, work=work, repeat=repeat)
        finally:
            node.stop()
            node.cleanup_work_dir()
        remove_node(plane.admin_rest(), name=node.name)
        print(f"reaction measured after {time.monotonic() - began:.0f}s", flush=True)
        if ns.quick:
            ns.jobs, ns.failures = min(ns.jobs, QUICK_JOBS), min(ns.failures, QUICK_FAILURES)
            ns.steady_seconds = min(ns.steady_seconds, QUICK_STEADY_SECONDS)
        if not ns.skip_scale:
            settings = FleetSettings(
                jobs=ns.jobs, kwok_nodes=ns.kwok_nodes,
                timeout=ns.timeout if ns.timeout is not None else 120.0 + ns.jobs,
                failures=ns.failures, steady_seconds=ns.steady_seconds,
                settle_seconds=ns.settle_seconds, baseline_ref=ns.baseline_ref)
            scale = measure_fleet(plane=plane, work=work, settings=settings)
    except BaseException:
        keep = True
        raise
    finally:
        plane.stop()
        if keep:
            print(f"operator logs kept in {work}", flush=True)
        else:
            remove_dir(work)
    duration = time.monotonic() - began
    report(reaction, scale)
    data = {"reaction": reaction, "scale": scale, "duration_seconds": duration,
            "cpus": os.cpu_count(), "load_average": os.getloadavg()}  # fmt: skip
    path = write_result(NAME, data)
    png = plot(reaction, scale)
    update_summary(summary_entries(reaction, scale))
    print(f"wrote {path} and {png} ({duration:.0f}s)", flush=True)
    return data
