"""Benchmark 6, fleet part: one operator, many jobs Running on kwok's fake nodes.

What is measured once every job is Running (see ``operator_bench`` for the whole
benchmark and ``bench/README.md`` for the numbers):

* **reaction under load** - drivers of different jobs are failed one by one while
  every other job keeps running; *pod seen Failed -> next attempt's pod seen
  created*, on this machine's monotonic clock, from one watch on the namespace.
  kwok plays the kubelet of the fake nodes, so a pod is failed the way a kubelet
  reports it: a patch of the pod's ``status`` subresource to phase ``Failed`` with
  the driver container terminated (exit code 137);
* **apiserver requests caused by the operator**, per job and minute, in a steady
  window (nothing happens but the operator's own resyncs) and in the failure window.
  They are counted by the apiserver itself: the operator runs with a client identity
  of its own (``e2e.controlplane.audit.OPERATOR_USER``) and the apiserver audits that
  user's requests at ``Metadata`` level, one line per finished request;
* **the operator's resident memory** and its reconcile passes (its own histogram).

With ``--baseline-ref`` the same fleet is measured a second time by the operator
package as it was at that commit (``git archive`` of ``operator/cjob_operator`` put
first on the operator's ``PYTHONPATH``; every other package is this checkout's), so
before and after come from the same run, the same cluster and the same jobs.
"""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import BenchmarkError, percentile, python_env
from bench.operator_cluster import (
    NAME,
    RECONCILE_SECONDS,
    JobCreation,
    OperatorRun,
    PodTimeline,
    add_untainted_fake_nodes,
    count_phases,
    create_namespace,
    failure_reasons,
    histogram_quantile,
    parse_histogram,
    sum_samples,
)
from cjob_lifecycle.plan import PlanSettings
from e2e.controlplane.audit import OPERATOR_USER, count_by_kind, read_audit_records
from e2e.operator_process import JOBS_PATH

NAMESPACE = "bench-scale"
REPO = Path(__file__).resolve().parents[1]
PODS_PER_NODE_MARGIN = 1.5
KILLED_EXIT_CODE = 137
SETTLED_RESYNC_FACTOR = 1.5


@dataclass(frozen=True)
class FleetSettings:
    jobs: int
    kwok_nodes: int
    timeout: float
    failures: int
    steady_seconds: float
    settle_seconds: float
    baseline_ref: str | None


def scale_job(*, name: str, namespace: str, storage: str, restarts: int) -> dict[str, Any]:
    """A small job whose driver pod lands on a fake node and never runs a process.

    Restart backoff 0, so the reaction measured is the operator's and not the policy's.
    """
    return {
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "checkpointed-jobs/runtime:0.1.0",
            "job": {"entrypoint": "job:build", "args": {"output": f"/nonexistent/{name}"}},
            "parallelism": 1,
            "spark": {"master": "local[1]", "driver": {"cores": 1, "memory": "512m"}},
            "checkpoint": {"storage": storage, "interval": "10s"},
            "restartPolicy": {"type": "OnFailure", "maxRestarts": restarts,
                              "backoff": {"initial": "0s", "max": "0s"}},
        },
    }


def job_name(index: int) -> str:
    return f"job-{index:04d}"


def kwok_capacity(*, jobs: int, nodes: int) -> dict[str, str]:
    """Room on the fake nodes for every driver pod, failed ones included."""
    pods = max(110, math.ceil(jobs * PODS_PER_NODE_MARGIN / max(1, nodes)))
    return {"cpu": "1024", "memory": "8Ti", "pods": str(pods)}


def operator_kubeconfig(plane: Any) -> Path:
    """A kubeconfig for the operator's own identity, whose requests the apiserver audits.

    It is in ``system:masters`` like the admin (the chart's RBAC is not what is
    measured here); only the user name differs.
    """
    path: Path = plane.write_client_kubeconfig(name="cjob-operator", user=OPERATOR_USER,
                                               groups=("system:masters",))
    return path


def baseline_source(*, ref: str, work: Path) -> Path:
    """The operator package as it was at ``ref``, unpacked under ``work``."""
    target = work / "baseline-operator"
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "operator/cjob_operator"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise BenchmarkError(benchmark=NAME, problem=f"git archive {ref} failed: "
                             f"{archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target / "operator"


def operator_env(source: Path | None) -> dict[str, str]:
    env = python_env()
    if source is not None:
        env["PYTHONPATH"] = f"{source}:{env['PYTHONPATH']}"
    return env


def start_operator(*, plane: Any, work: Path, label: str, source: Path | None) -> OperatorRun:
    operator = OperatorRun(namespace=NAMESPACE, kubeconfig=operator_kubeconfig(plane),
                           log_file=work / f"operator-fleet-{label}.log")
    operator.env = {**operator_env(source), "KUBECONFIG": str(operator.kubeconfig)}
    operator.start()
    return operator


class AuditWindow:
    """The operator's requests between :meth:`open` and :meth:`close`."""

    def __init__(self, plane: Any) -> None:
        self.path: Path = plane.audit_log
        self.offset = 0
        self.began = 0.0

    def open(self) -> None:
        self.offset = read_audit_records(self.path).end
        self.began = time.monotonic()

    def close(self, *, jobs: int) -> dict[str, Any]:
        time.sleep(1.0)  # the apiserver writes a request's line after answering it
        seconds = time.monotonic() - self.began - 1.0
        reading = read_audit_records(self.path, offset=self.offset, user=OPERATOR_USER)
        kinds = count_by_kind(reading.records)
        total = sum(kinds.values())
        minutes = seconds / 60.0
        return {"seconds": seconds, "requests": total, "by_kind": kinds,
                "per_job_per_minute": total / jobs / minutes if minutes > 0 else float("nan")}


def fail_pod(rest: Any, *, namespace: str, name: str) -> None:
    """Report the pod Failed as a kubelet would (kwok plays the kubelet here)."""
    pod = rest.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    statuses = []
    for container in pod["spec"]["containers"]:
        statuses.append({
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": False, "started": False, "restartCount": 0,
            "state": {"terminated": {"exitCode": KILLED_EXIT_CODE, "reason": "Error",
                                     "startedAt": pod["status"].get("startTime", now),
                                     "finishedAt": now}},
        })  # fmt: skip
    rest.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                 body={"status": {"phase": "Failed", "containerStatuses": statuses}},
                 content_type="application/merge-patch+json")  # fmt: skip


def current_pod(rest: Any, *, name: str) -> tuple[str, str]:
    """The job's current driver pod and the name its next attempt's pod will have."""
    job = rest.get(f"{JOBS_PATH.format(namespace=NAMESPACE)}/{name}")
    status = job.get("status") or {}
    attempt = int(status.get("attempt") or 1)
    return str(status.get("driverPod")), f"{name}-attempt-{attempt + 1}"


def fail_drivers(*, rest: Any, timeline: PodTimeline, jobs: list[str]) -> list[dict[str, Any]]:
    """Fail the drivers of ``jobs`` one after another; one sample per failure."""
    samples: list[dict[str, Any]] = []
    for count, name in enumerate(jobs, start=1):
        pod, following = current_pod(rest, name=name)
        timeline.wait(pod, "running", timeout=60)
        fail_pod(rest, namespace=NAMESPACE, name=pod)
        failed = timeline.wait(pod, "failed", timeout=60)
        created = timeline.wait(following, "added", timeout=60)
        timeline.wait(following, "running", timeout=60)
        samples.append({"job": name, "pod": pod, "next_pod": following,
                        "failed_to_created_s": created - failed})
        if count % 10 == 0:
            print(f"  failed {count}/{len(jobs)} drivers", flush=True)
    return samples


def reconcile_stats(before: str, after: str) -> dict[str, Any]:
    """Reconcile passes and their quantiles between two scrapes of the operator."""
    first = parse_histogram(before, RECONCILE_SECONDS)
    last = parse_histogram(after, RECONCILE_SECONDS)
    earlier = dict(first["buckets"])
    delta = {"buckets": [(bound, count - earlier.get(bound, 0.0))
                         for bound, count in last["buckets"]],
             "sum": last["sum"] - first["sum"], "count": last["count"] - first["count"]}
    return {"passes": delta["count"],
            "p50_s": histogram_quantile(0.5, delta), "p99_s": histogram_quantile(0.99, delta),
            "errors": sum_samples(after, "cjob_operator_reconcile_errors_total")
            - sum_samples(before, "cjob_operator_reconcile_errors_total")}


def wait_settled(operator: OperatorRun, *, jobs: int, quiet_seconds: float,
                 timeout: float) -> float:
    """Until the operator passed over every job at least once and its passes come no
    faster than its resyncs (its start-up pass is done); the seconds it took."""
    resync_passes = jobs * quiet_seconds / PlanSettings().resync_seconds
    began = time.monotonic()
    last = parse_histogram(operator.metrics(), RECONCILE_SECONDS)["count"]
    while True:
        time.sleep(quiet_seconds)
        now = parse_histogram(operator.metrics(), RECONCILE_SECONDS)["count"]
        quiet = now - last <= 1 + SETTLED_RESYNC_FACTOR * resync_passes
        if (quiet and now >= jobs) or time.monotonic() - began > timeout:
            return time.monotonic() - began
        last = now


def measure_operator(*, plane: Any, rest: Any, operator: OperatorRun, timeline: PodTimeline,
                     settings: FleetSettings, failing: list[str]) -> dict[str, Any]:
    """Steady window, then failure window, for the operator that runs now."""
    jobs = settings.jobs
    window = AuditWindow(plane)
    scrape = operator.metrics()
    window.open()
    time.sleep(settings.steady_seconds)
    steady = window.close(jobs=jobs)
    steady_scrape = operator.metrics()
    memory_steady = operator.memory_mb()
    print(f"  steady: {steady['per_job_per_minute']:.3f} requests/job/min "
          f"({steady['requests']} in {steady['seconds']:.0f}s)", flush=True)
    window.open()
    samples = fail_drivers(rest=rest, timeline=timeline, jobs=failing)
    failures = window.close(jobs=jobs)
    failure_scrape = operator.metrics()
    reaction = [s["failed_to_created_s"] for s in samples]
    print(f"  reaction p50 {percentile(reaction, 0.5) * 1000:.0f} ms, p99 "
          f"{percentile(reaction, 0.99) * 1000:.0f} ms over {len(reaction)} failures; "
          f"{failures['requests']} requests", flush=True)
    return {
        "rss_steady_mb": memory_steady["VmRSS"],
        "rss_peak_mb": operator.memory_mb()["VmHWM"],
        "steady_requests": steady,
        "steady_reconcile": reconcile_stats(scrape, steady_scrape),
        "failure_requests": {**failures,
                             "per_failure": failures["requests"] / max(1, len(samples))},
        "failure_reconcile": reconcile_stats(steady_scrape, failure_scrape),
        "reaction_p50_s": percentile(reaction, 0.5),
        "reaction_p99_s": percentile(reaction, 0.99),
        "reaction_max_s": max(reaction) if reaction else float("nan"),
        "failures": len(samples),
        "samples": samples,
    }


def failing_jobs(*, jobs: int, failures: int, round_index: int) -> list[str]:
    """Jobs spread over the fleet, a different set for each operator measured."""
    step = max(1, jobs // max(1, failures))
    return [job_name((i * step + round_index) % jobs) for i in range(failures)]


def measure_fleet(*, plane: Any, work: Path, settings: FleetSettings) -> dict[str, Any]:
    from e2e.controlplane.kwok import KwokNodes

    jobs = settings.jobs
    rest = plane.admin_rest()
    kwok = KwokNodes(control_plane=plane)
    kwok.start()
    api_client = plane.new_api_client()
    timeline = PodTimeline(api_client=api_client, namespace=NAMESPACE)
    operator: OperatorRun | None = None
    results: dict[str, Any] = {"jobs": jobs, "kwok_nodes": settings.kwok_nodes}
    try:
        nodes = add_untainted_fake_nodes(kwok, count=settings.kwok_nodes,
                                         capacity=kwok_capacity(jobs=jobs,
                                                                nodes=settings.kwok_nodes))
        create_namespace(rest, NAMESPACE)
        timeline.start()
        operator = start_operator(plane=plane, work=work, label="current", source=None)
        time.sleep(3.0)
        idle = operator.memory_mb()
        ramp = AuditWindow(plane)
        ramp.open()
        results["ramp"] = ramp_up(rest=rest, operator=operator, work=work, settings=settings)
        results["ramp"]["requests"] = ramp.close(jobs=jobs)
        results["ramp"]["rss_idle_mb"] = idle["VmRSS"]
        wait_settled(operator, jobs=jobs, quiet_seconds=settings.settle_seconds, timeout=600)
        results["current"] = measure_operator(
            plane=plane, rest=rest, operator=operator, timeline=timeline, settings=settings,
            failing=failing_jobs(jobs=jobs, failures=settings.failures, round_index=0))
        operator.stop()
        operator = None
        if settings.baseline_ref:
            source = baseline_source(ref=settings.baseline_ref, work=work)
            operator = start_operator(plane=plane, work=work, label="baseline", source=source)
            start = AuditWindow(plane)
            start.open()
            settled = wait_settled(operator, jobs=jobs, quiet_seconds=settings.settle_seconds,
                                   timeout=600)
            results["baseline_start"] = {**start.close(jobs=jobs), "settled_after_s": settled}
            results["baseline"] = measure_operator(
                plane=plane, rest=rest, operator=operator, timeline=timeline,
                settings=settings,
                failing=failing_jobs(jobs=jobs, failures=settings.failures, round_index=1))
            results["baseline"]["rss_after_start_mb"] = results["baseline"]["rss_steady_mb"]
            results["baseline_ref"] = settings.baseline_ref
        pods = rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods",
                        query={"labelSelector": "checkpointed.io/job"})["items"]  # fmt: skip
        results["driver_pods_on_fake_nodes"] = sum(
            1 for p in pods if p["spec"].get("nodeName") in nodes)
        results["attempt_end_reasons"] = failure_reasons(rest, NAMESPACE)
    finally:
        if operator is not None:
            operator.stop()
        timeline.stop()
        api_client.close()
        kwok.stop()
    return results


def ramp_up(*, rest: Any, operator: OperatorRun, work: Path,
            settings: FleetSettings) -> dict[str, Any]:
    """Create the jobs one by one and wait until all are Running."""
    jobs = settings.jobs
    storage = (work / "scale-checkpoints").as_uri()
    started = time.monotonic()
    creation = JobCreation(rest=rest, namespace=NAMESPACE, jobs=jobs, storage=storage,
                           build=lambda i: scale_job(name=job_name(i), namespace=NAMESPACE,
                                                     storage=storage,
                                                     restarts=settings.failures + 10))
    creation.start()
    series: list[dict[str, float]] = []
    deadline = started + settings.timeout
    while True:
        creation.check()
        phases = count_phases(rest, NAMESPACE)
        elapsed = time.monotonic() - started
        series.append({"t": elapsed, "created": creation.created,
                       "running": phases.get("Running", 0),
                       "rss_mb": operator.memory_mb()["VmRSS"]})  # fmt: skip
        if phases.get("Running", 0) == jobs:
            break
        if time.monotonic() > deadline:
            reasons = failure_reasons(rest, NAMESPACE)
            raise BenchmarkError(benchmark=NAME, problem=f"only {phases} of {jobs} jobs "
                                 f"Running after {settings.timeout:.0f}s; attempts ended by "
                                 f"{reasons}; operator log: {operator.log_file}")
        time.sleep(2.0)
    all_running = time.monotonic() - started
    print(f"  created {jobs} jobs in {creation.seconds:.1f}s; all Running after "
          f"{all_running:.1f}s", flush=True)
    text = operator.metrics()
    histogram = parse_histogram(text, RECONCILE_SECONDS)
    memory = operator.memory_mb()
    return {
        "create_seconds": creation.seconds,
        "all_running_seconds": all_running,
        "rss_all_running_mb": memory["VmRSS"],
        "rss_peak_mb": memory["VmHWM"],
        "reconcile_p50_s": histogram_quantile(0.5, histogram),
        "reconcile_p99_s": histogram_quantile(0.99, histogram),
        "reconcile_passes": histogram["count"],
        "reconcile_errors": sum_samples(text, "cjob_operator_reconcile_errors_total"),
        "series": series,
    }

