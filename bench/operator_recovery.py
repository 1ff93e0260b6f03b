"""Benchmark 5b: recovery time after the driver pod is killed (operator mode).

The same question as benchmark 5 (``recovery``), asked of the operator instead of
the embedded runner: how long from a driver's death to the first record processed
after restoring the latest checkpoint. Everything is real except the kubelet: the
local control plane (kube-apiserver, etcd, scheduler, controller-manager built from
Go modules; ``e2e/controlplane``), the operator as its own process
(``python -m cjob_operator``, started as the operator benchmark starts it), and a
process node that runs the driver pod as local processes, so the driver runs real
Spark in local mode and shares this machine's file system (``file://`` checkpoints
in a scratch folder).

One CheckpointedJob per repetition runs ``examples/running_sum`` (rate-limited,
parallelism 2, checkpoints every second, restart backoff 0). Once attempt 1 has
completed ``--kill-after-checkpoints`` checkpoints, the benchmark SIGKILLs the
driver pod's process group through the node, and right after it every other
process of the pod (PySpark's worker daemon puts itself in a process group of its
own; a real container's death takes it along). The time until attempt 2 processes
its first record is split, on one clock (this machine's), into:

* **detection** - kill until the pod is seen ``Failed`` (the node's part);
* **operator** - pod ``Failed`` until the next attempt's pod is seen created;
* **pod start** - pod created until its driver process started (scheduling, the
  node's pod worker, service account token, exec);
* **driver start** - interpreter, imports, store and restore point resolution;
* **Spark start** - ``SparkContext`` creation (JVM, local scheduler);
* **subtasks scheduled** - barrier stage launched, Python workers started,
  addresses exchanged, the first subtask registered with the coordinator;
* **state load** - that subtask restored its keyed state and started its tasks;
* **replay** - restored until the first record processed.

Pod times come from a watch on the namespace (the operator benchmark's
``PodTimeline``); driver times from the driver's status file ``timeline``, the
same milestones benchmark 5 uses. The operator does not give drivers a status file
(only ``--metrics-port``), so the benchmark's process node runs containers with a
``python`` that sets a status file inside the pod's folder in the driver's settings
document; nothing else about the pod changes.

The restore is checked against the checkpoint store: the newest checkpoint in the
job's ConfigMap once attempt 1 is dead must be the one attempt 2 restored
(``restoredFrom`` of both the driver and the CheckpointedJob's status).

Baseline, in the same run: each repetition's attempt 1 is a cold start, measured
from creating the CheckpointedJob to its first record processed.

**Warm standby** (``spec.standby.enabled``): every repetition also runs a second job
that asks for a standby driver pod, and kills its driver once the standby pod is
Ready (its readiness probe found the runtime's readiness file). Attempt 2 is then
the promoted standby, not a new pod: its phases are detection, operator (pod
``Failed`` until the standby's driver logs its promotion: the operator's pass, the
fence, the promotion written on the checkpoint ConfigMap and the standby's watch
delivering it), then subtasks scheduled, state load and replay as above. Its
baseline is the cold start of the job without a standby in the same repetition
(with a standby, attempt 1 starts beside its standby and is slower).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    BenchmarkError,
    env_int,
    fresh_dir,
    median,
    plot_path,
    plot_phases,
    print_table,
    remove_dir,
    target_entry,
    update_summary,
    write_result,
)
from bench.operator_bench import install_crd, kill_when_possible, start_control_plane
from bench.operator_cluster import OperatorRun, PodTimeline, create_namespace, wait_until
from bench.recovery import STANDBY_TARGET_RATIO, STANDBY_TARGET_SECONDS, TARGET_SECONDS
from e2e.controlplane.container_launch import POD_DIR_ENV
from e2e.jobs import running_sum_job
from e2e.operator_process import JOBS_PATH

NAME = "recovery-operator"
NAMESPACE = "bench-recovery"
PHASES = ["detection", "operator", "pod start", "driver start", "Spark start",
          "subtasks scheduled", "state load", "replay"]
STATUS_FILE = "status.json"
PYTHON_SHIM = """#!{interpreter}
# The driver container runs "python -m job_runtime run --settings DOCUMENT" (or flags).
# The operator asks for no status file: one in the pod's folder goes into the document
# (the runtime refuses a flag beside it), or is added as a flag; anything else runs
# unchanged.
import dataclasses, os, sys
args = sys.argv[1:]
pod = os.environ.get("CJOB_POD_DIR")
if args[:3] == ["-m", "job_runtime", "run"] and pod:
    status = os.path.join(pod, {status!r})
    if "--settings" in args:
        from cjob_spec.runtime_settings import RuntimeSettings
        at = args.index("--settings") + 1
        given = RuntimeSettings.decode(args[at])
        args[at] = dataclasses.replace(given, status_file=status).encode()
    else:
        args += ["--status-file", status]
os.execv({python!r}, [{python!r}, *args])
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kill-after-checkpoints", type=int, default=3,
                        help="checkpoints attempt 1 completes before its pod is killed")
    parser.add_argument("--repeat", type=int, default=env_int("BENCH_REPEAT", 3))
    parser.add_argument("--rate", type=int, default=5_000,
                        help="records/s of the running-sum source (default 5000)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="give up waiting for any one step after this many seconds")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep pod and operator logs under bench/work (kept anyway on "
                             "failure)")


# --------------------------------------------------------------------- preconditions


def check_prerequisites() -> None:
    """Fail early, in one line, on what would otherwise fail deep inside a pod."""
    from cjob_operator.config import OperatorConfig

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise BenchmarkError(benchmark=NAME, problem="Java is not installed (Spark needs it)")
    port = OperatorConfig().metrics_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise BenchmarkError(benchmark=NAME, problem=f"port {port} is in use: driver pods "
                                 "on the process node serve their metrics there (is another "
                                 "driver running?)") from None


def control_plane() -> Any:
    """The operator benchmark's control plane, with a readable error when it cannot start."""
    try:
        return start_control_plane()
    except BenchmarkError:
        raise
    except Exception as exc:
        raise BenchmarkError(benchmark=NAME, problem=f"the local control plane did not start "
                             f"({type(exc).__name__}: {exc}); `make controlplane` builds its "
                             "binaries") from None


# --------------------------------------------------------------------- the pod's processes


def write_python_shim(directory: Path, *, python: str = sys.executable) -> Path:
    """A ``python`` for the process node's ``PATH`` that gives drivers a status file."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "python"
    shim.write_text(PYTHON_SHIM.format(interpreter=sys.executable, python=python,
                                       status=STATUS_FILE))
    shim.chmod(0o755)
    return directory


def pod_processes(prefix: str) -> list[int]:
    """Processes of pods whose folder starts with ``prefix``.

    The node gives every container its pod's folder in ``CJOB_POD_DIR`` and the
    JVM and Python workers inherit it, whatever process group they put themselves
    in, so the environment finds all of a pod's processes.
    """
    marker = f"{POD_DIR_ENV}={prefix}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(marker) for item in environ.split(b"\0")):
            found.append(int(entry.name))
    return found


def kill_pod_processes(prefix: str) -> int:
    """SIGKILL every process of the pods under ``prefix``; how many there were."""
    pids = pod_processes(prefix)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


# --------------------------------------------------------------------- the cluster


@dataclass(kw_only=True)
class Cluster:
    """What one run uses: control plane, process node, pod watch and operator."""

    plane: Any
    node: Any
    rest: Any
    timeline: PodTimeline
    operator: OperatorRun
    work: Path

    def pod_prefix(self, pod: str = "") -> str:
        """The folder prefix of this run's pods (of one pod name when given)."""
        if not pod:
            return str(self.node.pods_dir) + os.sep
        return str(self.node.pods_dir / f"{NAMESPACE}_{pod}_")

    def status_file(self, pod: str) -> dict[str, Any] | None:
        """The driver status file of ``pod``, once the node runs it and it was written."""
        try:
            path = Path(self.node.pod_dir(namespace=NAMESPACE, name=pod)) / STATUS_FILE
            data: dict[str, Any] = json.loads(path.read_text())
            return data
        except (LookupError, OSError, ValueError):
            return None

    def job(self, name: str) -> dict[str, Any] | None:
        from e2e.controlplane.rest import ApiError

        try:
            job: dict[str, Any] = self.rest.get(f"{JOBS_PATH.format(namespace=NAMESPACE)}/{name}")
            return job
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def store_latest(self, job: str) -> int | None:
        """The newest checkpoint in the job's ConfigMap store."""
        from cjob_checkpoint.store.configmap_layout import StoreObject

        body = self.rest.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{job}-checkpoints")
        ids = StoreObject(body).live_ids()
        return max(ids) if ids else None


@contextlib.contextmanager
def running_cluster(*, work: Path) -> Iterator[Cluster]:
    """Start everything one run needs, and stop all of it however the run ends."""
    from e2e.controlplane.process_node import ProcessNode

    plane = control_plane()
    node: Any = None
    api_client: Any = None
    timeline: PodTimeline | None = None
    operator: OperatorRun | None = None
    try:
        rest = plane.admin_rest()
        install_crd(rest)
        node = ProcessNode(control_plane=plane, work_dir=work / "node",
                           python_bin_dir=write_python_shim(work / "shim"))
        node.start()
        node.wait_until_ready(timeout=120)
        create_namespace(rest, NAMESPACE)
        api_client = plane.new_api_client()
        timeline = PodTimeline(api_client=api_client, namespace=NAMESPACE)
        timeline.start()
        operator = OperatorRun(namespace=NAMESPACE, kubeconfig=plane.kubeconfig,
                               log_file=work / "operator.log")
        operator.start()
        yield Cluster(plane=plane, node=node, rest=rest, timeline=timeline, operator=operator,
                      work=work)
    finally:
        if operator is not None:
            operator.stop()  # first, so nothing restarts the drivers killed next
        if node is not None:
            kill_pod_processes(str(node.pods_dir) + os.sep)
            node.stop()
            kill_pod_processes(str(node.pods_dir) + os.sep)
        if timeline is not None:
            timeline.stop()
        if api_client is not None:
            api_client.close()
        plane.stop()


# --------------------------------------------------------------------- one repetition


def wait_for(check: Callable[[], Any], *, what: str, timeout: float,
             cluster: Cluster) -> Any:  # fmt: skip
    """Poll ``check`` every 50 ms; a timeout names what was awaited and the operator's log."""
    return wait_until(check, what=what, timeout=timeout, interval=0.05, benchmark=NAME,
                      detail=lambda: f"operator log tail:\n{cluster.operator.log_tail(10)}")


def standby_ready(cluster: Cluster, *, pod: str, timeout: float) -> None:
    """Wait until the standby pod is Ready: Spark started and the job's code loaded."""
    from e2e.controlplane.rest import ApiError
    from e2e.controlplane.waiting import pod_is_ready

    def ready() -> bool:
        try:
            return pod_is_ready(cluster.rest.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}"))
        except ApiError:
            return False

    wait_for(ready, cluster=cluster, timeout=timeout, what=f"the standby {pod} to be Ready")


def driver_status(cluster: Cluster, *, pod: str, checkpoints: int, timeout: float) -> Any:
    """The pod's status file once its driver processed a record and completed checkpoints."""
    def ready() -> dict[str, Any] | None:
        status = cluster.status_file(pod)
        if status and "firstRecordAt" in status.get("timeline", {}) \
                and status["checkpoints"]["completed"] >= checkpoints:
            return status
        return None

    return wait_for(ready, cluster=cluster, timeout=timeout,
                    what=f"{pod} to process records and complete {checkpoints} checkpoint(s)")


def measure_once(cluster: Cluster, *, index: int, ns: argparse.Namespace,
                 standby: bool = False) -> dict[str, Any]:
    """Create a job, kill its first driver pod, and time the way to attempt 2's first record.

    With ``standby`` the job has a warm standby pod, and attempt 2 is that pod promoted.
    """
    name = f"warm-{index}" if standby else f"sums-{index}"
    first = f"{name}-attempt-1"
    second = f"{name}-standby-1" if standby else f"{name}-attempt-2"
    job = running_sum_job(name=name, namespace=NAMESPACE, work_dir=cluster.work / name,
                          rate=ns.rate, count=int(ns.rate * ns.timeout * 4),
                          backoff=("0s", "0s"))
    if standby:
        job["spec"]["standby"] = {"enabled": True}
    created_at = time.monotonic()
    cluster.rest.request("POST", JOBS_PATH.format(namespace=NAMESPACE), body=job)
    before = driver_status(cluster, pod=first, checkpoints=ns.kill_after_checkpoints,
                           timeout=ns.timeout)
    if standby:
        standby_ready(cluster, pod=second, timeout=ns.timeout)
    offset = time.time() - time.monotonic()
    load_at_kill = os.getloadavg()[0]
    killed_at = kill_when_possible(cluster.node, namespace=NAMESPACE, name=first)
    leftovers = kill_pod_processes(cluster.pod_prefix(first))
    failed_at = cluster.timeline.wait(first, "failed", timeout=ns.timeout)
    latest_in_store = cluster.store_latest(name)
    after = driver_status(cluster, pod=second, checkpoints=1, timeout=ns.timeout)
    t = {key: float(value) - offset for key, value in after["timeline"].items()
         if key.endswith("At")}
    if standby:
        # The standby's pod ran long before: its start is its promotion.
        created_next_at = running_at = t["promotedAt"]
    else:
        created_next_at = cluster.timeline.wait(second, "added", timeout=ns.timeout)
        running_at = cluster.timeline.wait(second, "running", timeout=ns.timeout)
    status = wait_for(lambda: _restored_status(cluster, name), cluster=cluster,
                      timeout=ns.timeout, what=f"{name}'s status to show attempt 2 restored")
    restored = min(t["firstReadyAt"], t["firstRecordAt"])
    if standby:
        started = {"pod start": 0.0, "driver start": 0.0, "Spark start": 0.0,
                   "subtasks scheduled": t["epochStartedAt"] - t["promotedAt"]}
    else:
        started = {"pod start": t["driverStartedAt"] - created_next_at,
                   "driver start": t["sparkStartingAt"] - t["driverStartedAt"],
                   "Spark start": t["sparkReadyAt"] - t["sparkStartingAt"],
                   "subtasks scheduled": t["epochStartedAt"] - t["sparkReadyAt"]}
    phases = {
        "detection": failed_at - killed_at,
        "operator": created_next_at - failed_at,
        **started,
        "state load": restored - t["epochStartedAt"],
        "replay": t["firstRecordAt"] - restored,
    }
    restored_driver = (after.get("restoredFrom") or {}).get("id")
    restored_job = (status.get("restoredFrom") or {}).get("id")
    return {
        "job": name,
        "mode": "standby" if standby else "restart",
        "driver_pod": status.get("driverPod"),
        "total_s": t["firstRecordAt"] - killed_at,
        "phases_s": phases,
        "pod_seen_running_s": running_at - created_next_at,
        "cold_start_s": float(before["timeline"]["firstRecordAt"]) - offset - created_at,
        "leftover_processes_killed": leftovers,
        "load_average_at_kill": load_at_kill,
        "latest_checkpoint_seen_before_kill": (before.get("latestCheckpoint") or {}).get("id"),
        "latest_checkpoint_in_store_after_kill": latest_in_store,
        "restored_from_driver": restored_driver,
        "restored_from_job_status": restored_job,
        "restored_latest": latest_in_store is not None
                           and restored_driver == restored_job == latest_in_store,
        "checkpoint_bytes": (before.get("latestCheckpoint") or {}).get("sizeBytes"),
        "state_read_s": after["timeline"].get("restoreSecondsMax"),
        "last_failure": status.get("lastFailure"),
        "restarts": status.get("restarts"),
    }


def _restored_status(cluster: Cluster, name: str) -> dict[str, Any] | None:
    status: dict[str, Any] = (cluster.job(name) or {}).get("status") or {}
    if status.get("attempt") == 2 and status.get("restoredFrom"):
        return status
    return None


def retire_job(cluster: Cluster, *, name: str, timeout: float) -> None:
    """Delete the job and make sure none of its processes is left to disturb the next one."""
    cluster.rest.request("DELETE", f"{JOBS_PATH.format(namespace=NAMESPACE)}/{name}")
    prefix = cluster.pod_prefix(f"{name}-")

    def gone() -> bool:
        kill_pod_processes(prefix)
        return cluster.job(name) is None

    wait_for(gone, cluster=cluster, timeout=timeout, what=f"{name} to be deleted")
    wait_for(lambda: not pod_processes(prefix), cluster=cluster, timeout=30,
             what=f"the processes of {name}'s pods to end")


# --------------------------------------------------------------------- the run


def measure(ns: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    began = time.monotonic()
    samples: list[dict[str, Any]] = []
    with running_cluster(work=work) as cluster:
        print(f"[{NAME}] control plane, process node and operator up after "
              f"{time.monotonic() - began:.0f}s", flush=True)
        for index in range(1, ns.repeat + 1):
            print(f"[{NAME}] repetition {index}/{ns.repeat}: kill the driver pod after "
                  f"{ns.kill_after_checkpoints} checkpoints", flush=True)
            for standby in (False, True):
                sample = measure_once(cluster, index=index, ns=ns, standby=standby)
                samples.append(sample)
                print(f"[{NAME}]   {sample['mode']}: {sample['total_s']:.1f}s to the first "
                      f"record after restoring checkpoint {sample['restored_from_driver']} "
                      f"(newest in the store: {sample['latest_checkpoint_in_store_after_kill']}"
                      f"; attempt 2 ran in {sample['driver_pod']})", flush=True)
                retire_job(cluster, name=sample["job"], timeout=ns.timeout)
    return samples


def run(ns: argparse.Namespace) -> dict[str, Any]:
    check_prerequisites()
    work = fresh_dir(NAME)
    keep = bool(ns.keep_work)
    try:
        samples = measure(ns, work)
    except BenchmarkError as exc:
        keep = True
        if exc.benchmark != NAME:  # helpers of the operator benchmark name their own
            raise BenchmarkError(benchmark=NAME, problem=exc.problem) from None
        raise
    except BaseException:
        keep = True
        raise
    finally:
        if keep:
            print(f"[{NAME}] pod and operator logs kept in {work}", flush=True)
        else:
            remove_dir(work)
    return report(ns, samples)


def report(ns: argparse.Namespace, samples: list[dict[str, Any]]) -> dict[str, Any]:
    restarts = [s for s in samples if s["mode"] == "restart"]
    standbys = [s for s in samples if s["mode"] == "standby"]
    cold = median(s["cold_start_s"] for s in restarts)
    summaries: dict[str, dict[str, Any]] = {}
    for mode, group in (("restart", restarts), ("standby", standbys)):
        phase_medians = {p: median(s["phases_s"][p] for s in group) for p in PHASES}
        total = median(s["total_s"] for s in group)
        rows: list[list[Any]] = [[p, *[s["phases_s"][p] for s in group], phase_medians[p]]
                                 for p in PHASES]
        rows.append(["total (kill -> first record)", *[s["total_s"] for s in group], total])
        rows.append(["baseline: job created -> first record",
                     *[s["cold_start_s"] for s in group], median(s["cold_start_s"] for s in group)])
        rows.append(["restored the newest checkpoint", *[s["restored_latest"] for s in group],
                     all(s["restored_latest"] for s in group)])
        title = ("recovery (operator mode, new driver pod, seconds)" if mode == "restart"
                 else "recovery (operator mode, warm standby pod promoted, seconds)")
        print_table(title, ["phase", *[f"#{i + 1}" for i in range(len(group))], "median"], rows)
        summaries[mode] = {"total_s": total, "phases_s": phase_medians,
                           "cold_start_s": median(s["cold_start_s"] for s in group),
                           "pod_seen_running_s": median(s["pod_seen_running_s"] for s in group)}
    total = summaries["restart"]["total_s"]
    standby_total = summaries["standby"]["total_s"]
    ratio = standby_total / cold
    met = total <= TARGET_SECONDS
    standby_met = standby_total <= STANDBY_TARGET_SECONDS and ratio <= STANDBY_TARGET_RATIO
    promoted = all(s["driver_pod"] == s["job"] + "-standby-1" for s in standbys)
    restored_latest = all(s["restored_latest"] for s in samples)
    print(f"[{NAME}] warm standby: {standby_total:.1f}s = {ratio:.2f}x the cold start "
          f"({cold:.1f}s); targets <= {STANDBY_TARGET_SECONDS}s and <= {STANDBY_TARGET_RATIO}x: "
          f"{'met' if standby_met else 'not met'}", flush=True)
    data = {
        "scale": {"rate": ns.rate, "parallelism": 2, "checkpoint_interval_s": 1.0,
                  "kill_after_checkpoints": ns.kill_after_checkpoints, "backoff": "0s",
                  "repeat": ns.repeat, "job": "examples/running_sum"},
        "samples": samples,
        "median": {**summaries["restart"], "cold_start_s": cold},
        "standby": {"median": summaries["standby"], "ratio_to_cold_start": ratio,
                    "promoted_every_time": promoted,
                    "target": {"seconds": STANDBY_TARGET_SECONDS, "ratio": STANDBY_TARGET_RATIO,
                               "met": standby_met}},
        "restored_latest_every_time": restored_latest,
        "target": {"seconds": TARGET_SECONDS, "met": met},
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    path = write_result(NAME, data)
    plot_phases(name=NAME, phases=summaries["restart"]["phases_s"], order=PHASES, baseline=cold,
                target=TARGET_SECONDS,
                title="Driver pod kill -> first record after restore (operator mode)")
    update_summary({
        "recovery_operator_seconds": target_entry(
            value=total, target=TARGET_SECONDS,
            unit="s from driver pod SIGKILL to first record processed after restore "
                 "(operator mode)",
            met=met, baseline=cold,
            note="baseline: CheckpointedJob created to attempt 1's first record (cold start, "
                 "same run); phases in recovery-operator.json; restored the newest checkpoint "
                 f"every time: {'yes' if restored_latest else 'NO'}"),
        "recovery_operator_standby_seconds": target_entry(
            value=standby_total, target=STANDBY_TARGET_SECONDS,
            unit="s from driver pod SIGKILL to first record, warm standby pod promoted "
                 "(operator mode)",
            met=standby_met, baseline=cold,
            note=f"also <= {STANDBY_TARGET_RATIO}x the cold start of the same run "
                 f"(ratio {ratio:.2f}); baseline: the job without a standby, created to its "
                 "first record; promoted the standby every time: "
                 f"{'yes' if promoted else 'NO'}"),
    })
    print(f"[{NAME}] wrote {path} and {plot_path(NAME)}", flush=True)
    if not restored_latest:
        raise BenchmarkError(benchmark=NAME, problem="a restart did not restore the newest "
                             f"checkpoint of the store (see {path})")
    if not promoted:
        raise BenchmarkError(benchmark=NAME, problem="a job with a ready standby restarted "
                             f"in a new pod instead of promoting it (see {path})")
    return data
