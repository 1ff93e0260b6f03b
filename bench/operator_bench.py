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
import os
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BenchmarkError,
    fresh_dir,
    percentile,
    plot_path,
    print_table,
    pyplot,
    remove_dir,
    target_entry,
    update_summary,
    write_result,
)
from bench.operator_cluster import (
    NAME,
    RECONCILE_SECONDS,
    OperatorRun,
    PodTimeline,
    create_namespace,
    histogram_quantile,
    parse_histogram,
    wait_until,
)
from bench.operator_fleet import FleetSettings, measure_fleet
from e2e.controlplane.namespaces import resource_exists
from e2e.jobs import running_sum_job
from e2e.operator_process import JOBS_PATH

REACTION_JOB = "react"
REACTION_TARGET_SECONDS = 1.0
RSS_TARGET_MB = 250.0
QUICK_JOBS, QUICK_FAILURES, QUICK_STEADY_SECONDS, QUICK_REPEAT = 50, 10, 70.0, 5


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
