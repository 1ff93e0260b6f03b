"""Benchmark 5: recovery time after the driver is killed (embedded mode).

``cjob run`` supervises a rate-limited keyed aggregation (parallelism 2,
checkpoints every second, 100k keys). Once attempt 1 completed
``--kill-after-checkpoints`` checkpoints, the benchmark SIGKILLs the driver's
process group (driver, its JVM and Python workers: what the embedded runner's
``--kill-driver-after`` does, with the moment chosen by checkpoint count rather
than by time). The runner restarts the job from the latest checkpoint; the
time until attempt 2's keyed stage processes its first record is split into:

* **detection** - kill until the runner saw attempt 1 end;
* **restart delay** - the restart policy's backoff (``--backoff``, default 0s);
* **driver start** - new process, imports, restore point resolution;
* **Spark start** - ``SparkContext`` creation (JVM, local scheduler), which
  overlaps the driver opening the store and resolving the restore;
* **subtasks scheduled** - barrier stage launched, Python workers started,
  addresses exchanged, the first subtask registered with the coordinator;
* **state load** - that subtask built the pipeline, read and restored its
  keyed state and started its tasks (``state_read_s`` in the JSON is the
  reading and restoring alone, the largest over subtasks);
* **replay** - from restored to the first record processed (sources reopen
  their splits at the checkpointed positions).

The times come from the runner's output (timestamped as it arrives) and the
driver's status file ``timeline`` (wall clock, same machine). Operator mode
(driver pod killed, new pod) is measured by ``python -m bench recovery-operator``
(``bench/operator_recovery.py``), which owns ``recovery_operator_seconds`` in
``summary.json``.

Baseline, in the same run: a cold start of the same job (``cjob run`` to the
first record processed, no restore), which is what a restart without
checkpoints would also have to pay before reprocessing everything.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    BenchmarkError,
    env_int,
    fresh_dir,
    median,
    plot_phases,
    print_table,
    python_env,
    remove_dir,
    target_entry,
    update_summary,
    write_result,
)

TARGET_SECONDS = 15.0
SUBTASK_TARGET_SECONDS = 5.0
STANDBY_TARGET_SECONDS = 3.0
STANDBY_TARGET_RATIO = 0.4
"""With a warm standby: at most 3 s and at most 0.4x a cold start measured in the same run."""
PHASES = ["detection", "restart delay", "driver start", "Spark start", "subtasks scheduled",
          "state load", "replay"]

JOB_YAML = """\
apiVersion: checkpointed.io/v1alpha1
kind: CheckpointedJob
metadata:
  name: {name}
spec:
  image: checkpointed-jobs/runtime:bench
  job:
    entrypoint: bench.jobs:keyed_aggregate
    pythonPath: [{repo}]
    args: {{count: {count}, keys: {keys}, rate: {rate}}}
  parallelism: 2
  spark:
    master: local[2]
    conf: {spark_conf}
  checkpoint:
    storage: file:///unused
    interval: 1s
    retained: 3
  restartPolicy:
    type: OnFailure
    maxRestarts: 3
    backoff: {{initial: {backoff}, max: 10s}}
  standby: {{enabled: {standby}}}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=int, default=env_int("BENCH_KEYS", 100_000))
    parser.add_argument("--rate", type=int, default=200_000, help="source records/s")
    parser.add_argument("--kill-after-checkpoints", type=int, default=3)
    parser.add_argument("--backoff", default="0s", help="restart backoff of the job spec")
    parser.add_argument("--repeat", type=int, default=env_int("BENCH_REPEAT", 3))
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="Spark setting of the job (repeatable), e.g. "
                             "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="give up on one repetition after this many seconds")
    parser.add_argument("--kill", choices=["driver", "subtask"], default="driver",
                        help="what dies: the driver's process group, or one Python worker "
                             "of the barrier stage (Spark relaunches the stage in place)")
    parser.add_argument("--standby", action="store_true",
                        help="the job has a warm standby driver (spec.standby), which is "
                             "promoted when the driver is killed; the cold start baseline "
                             "has none")


class _Runner:
    """``cjob run`` in its own session, with every output line timestamped on arrival."""

    def __init__(self, *, job_file: Path, state_dir: Path,
                 env: dict[str, str] | None = None) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cjob", "run", str(job_file), "--state-dir", str(state_dir),
             "--fresh"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**python_env(), **(env or {})}, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip()))

    def first_line(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)

    def stop(self, driver_pids: list[int]) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        for pid in driver_pids:  # drivers run in their own process groups
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._reader.join(timeout=5)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return None


def _wait_for(predicate: Any, *, timeout: float, what: str, runner: _Runner) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if runner.proc.poll() is not None:
            tail = "\n".join(line for _, line in runner.lines[-10:])
            raise BenchmarkError(benchmark="recovery",
                                 problem=f"the runner ended while waiting for {what}:\n{tail}")
        time.sleep(0.05)
    raise BenchmarkError(benchmark="recovery", problem=f"timed out waiting for {what}")


def _job_file(work: Path, *, name: str, ns: argparse.Namespace, standby: bool = False) -> Path:
    path = work / f"{name}.yaml"
    count = int(ns.rate * ns.timeout * 2)
    conf = dict(item.split("=", 1) for item in ns.spark_conf)
    path.write_text(JOB_YAML.format(name=name, repo=json.dumps(str(REPO)), count=count,
                                    keys=ns.keys, rate=ns.rate, backoff=ns.backoff,
                                    spark_conf=json.dumps(conf),
                                    standby=json.dumps(standby)))
    return path


def measure_recovery(ns: argparse.Namespace) -> dict[str, Any]:
    work = fresh_dir("recovery")
    name = "bench-recovery"
    runner = _Runner(job_file=_job_file(work, name=name, ns=ns, standby=ns.standby),
                     state_dir=work / "state")
    job_dir = work / "state" / name
    pids: list[int] = []
    try:
        def attempt_one_ready() -> dict[str, Any] | None:
            status = _read_json(job_dir / "attempt-1.progress.json")
            if ns.standby and not (job_dir / f"{name}-standby-1.promote.ready").exists():
                return None
            if status and status["checkpoints"]["completed"] >= ns.kill_after_checkpoints:
                return status
            return None

        before = _wait_for(attempt_one_ready, timeout=ns.timeout, runner=runner,
                           what=f"{ns.kill_after_checkpoints} checkpoints of attempt 1")
        pids.append(int(before["pid"]))
        killed_at = time.time()
        os.killpg(int(before["pid"]), signal.SIGKILL)
        latest_before = (before.get("latestCheckpoint") or {}).get("id")

        def attempt_two_running() -> dict[str, Any] | None:
            status = _read_json(job_dir / "attempt-2.progress.json")
            if status and "firstRecordAt" in status.get("timeline", {}) \
                    and status["checkpoints"]["completed"] >= 1:
                return status
            return None

        after = _wait_for(attempt_two_running, timeout=ns.timeout, runner=runner,
                          what="attempt 2 processing and checkpointing")
        pids.append(int(after["pid"]))
    finally:
        runner.stop(pids)
    detected_at = runner.first_line("attempt 1 failed")
    restart_at = runner.first_line("starting attempt 2")
    if detected_at is None or restart_at is None:
        raise BenchmarkError(benchmark="recovery", problem="runner output lacks the restart")
    t = after["timeline"]
    first = float(t["firstRecordAt"])
    registered = float(t["epochStartedAt"])
    restored = min(float(t["firstReadyAt"]), first)
    if "promotedAt" in t:
        # A promoted standby started its driver and Spark before the kill: its start
        # is the promotion (the runner's signal reaching it) and what follows it.
        promoted = float(t["promotedAt"])
        driver_start, spark_start, spark_ready = promoted - restart_at, 0.0, promoted
    else:
        driver_start = float(t["sparkStartingAt"]) - restart_at
        spark_start = float(t["sparkReadyAt"]) - float(t["sparkStartingAt"])
        spark_ready = float(t["sparkReadyAt"])
    phases = {
        "detection": detected_at - killed_at,
        "restart delay": restart_at - detected_at,
        "driver start": driver_start,
        "Spark start": spark_start,
        "subtasks scheduled": registered - spark_ready,
        "state load": restored - registered,
        "replay": first - restored,
    }
    restored_from = (after.get("restoredFrom") or {}).get("id")
    remove_dir(work)
    return {"total_s": first - killed_at, "phases_s": phases, "killed_at": killed_at,
            "latest_checkpoint_before_kill": latest_before, "restored_from": restored_from,
            "checkpoint_bytes": (before.get("latestCheckpoint") or {}).get("sizeBytes"),
            "state_read_s": t.get("restoreSecondsMax")}


SUBTASK_PHASES = ["relaunch", "state load", "replay"]


def measure_subtask_recovery(ns: argparse.Namespace) -> dict[str, Any]:
    """One Python worker of the barrier stage dies; Spark relaunches the stage in place.

    The kill is the runtime's own fault point ``subtask.after-snapshot`` (the worker
    SIGKILLs itself right after snapshotting checkpoint ``--kill-after-checkpoints`` + 1,
    so that checkpoint never completes); its marker file's modification time is the
    moment of the kill. Phases: **relaunch** (kill until the first subtask of the new
    stage attempt registered: Spark saw the lost task, failed and resubmitted the
    stage, started Python workers and the subtasks exchanged addresses), **state
    load** (until that subtask restored its state and started its tasks), **replay**
    (until the first record was processed).
    """
    work = fresh_dir("recovery-subtask")
    name = "bench-recovery-subtask"
    faults = work / "faults"
    faults.mkdir()
    point = f"subtask.after-snapshot@{ns.kill_after_checkpoints + 1}"
    runner = _Runner(job_file=_job_file(work, name=name, ns=ns), state_dir=work / "state",
                     env={"CJOB_FAULTS": point, "CJOB_FAULTS_DIR": str(faults)})
    progress = work / "state" / name / "attempt-1.progress.json"
    pids: list[int] = []
    try:
        def killed() -> float | None:
            markers = list(faults.glob(".cjob-fault-*"))
            return markers[0].stat().st_mtime if markers else None

        killed_at = _wait_for(killed, timeout=ns.timeout, runner=runner,
                              what=f"the fault point {point}")

        def relaunched() -> dict[str, Any] | None:
            status = _read_json(progress)
            if status and status.get("subtaskRestarts", 0) >= 1 \
                    and "firstRecordAt" in status.get("timeline", {}):
                return status
            return None

        after = _wait_for(relaunched, timeout=ns.timeout, runner=runner,
                          what="the relaunched subtasks processing")
        pids.append(int(after["pid"]))
    finally:
        runner.stop(pids)
    if runner.first_line("attempt 1 failed") is not None:
        raise BenchmarkError(benchmark="recovery",
                             problem="the driver failed instead of relaunching the subtasks")
    t = after["timeline"]
    first = float(t["firstRecordAt"])
    registered = float(t["epochStartedAt"])
    restored = min(float(t.get("firstReadyAt", first)), first)
    remove_dir(work)
    return {"total_s": first - killed_at,
            "phases_s": {"relaunch": registered - killed_at, "state load": restored - registered,
                         "replay": first - restored},
            "restored_from": (after.get("restoredFrom") or {}).get("id"),
            "state_read_s": t.get("restoreSecondsMax")}


def run_subtask_kill(ns: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for i in range(ns.repeat):
        print(f"[recovery] repetition {i + 1}/{ns.repeat}: subtask kill", flush=True)
        runs.append(measure_subtask_recovery(ns))
        print(f"[recovery]   {runs[-1]['total_s']:.1f}s to the first record after restoring "
              f"checkpoint {runs[-1]['restored_from']}", flush=True)
    medians = {p: median(r["phases_s"][p] for r in runs) for p in SUBTASK_PHASES}
    total = median(r["total_s"] for r in runs)
    rows = [[p, *[r["phases_s"][p] for r in runs], medians[p]] for p in SUBTASK_PHASES]
    rows.append(["total (kill -> first record)", *[r["total_s"] for r in runs], total])
    print_table("recovery after a subtask kill (embedded mode, seconds)",
                ["phase", *[f"#{i + 1}" for i in range(len(runs))], "median"], rows)
    met = total <= SUBTASK_TARGET_SECONDS
    data = {"scale": {"keys": ns.keys, "rate": ns.rate, "parallelism": 2,
                      "kill_after_checkpoints": ns.kill_after_checkpoints,
                      "repeat": ns.repeat, "spark_conf": ns.spark_conf},
            "runs": runs, "median": {"total_s": total, "phases_s": medians},
            "target": {"seconds": SUBTASK_TARGET_SECONDS, "met": met}}
    write_result("recovery-subtask", data)
    update_summary({
        "recovery_subtask_seconds": target_entry(
            value=total, target=SUBTASK_TARGET_SECONDS,
            unit="s from a subtask's Python worker SIGKILL to first record processed after "
                 "restore (embedded)", met=met, baseline=None,
            note="phases in recovery-subtask.json"),
    })
    return data


def _report_standby(ns: argparse.Namespace, *, recoveries: list[dict[str, Any]],
                    cold: list[dict[str, Any]], total: float, cold_total: float,
                    phase_medians: dict[str, float]) -> dict[str, Any]:
    """The standby run's own result file and summary entry (``recovery_standby_seconds``)."""
    ratio = total / cold_total if cold_total else float("nan")
    met = total <= STANDBY_TARGET_SECONDS and ratio <= STANDBY_TARGET_RATIO
    print(f"[recovery] standby takeover {total:.2f}s = {ratio:.2f}x the cold start "
          f"({cold_total:.1f}s); targets <= {STANDBY_TARGET_SECONDS}s and "
          f"<= {STANDBY_TARGET_RATIO}x: {'met' if met else 'not met'}", flush=True)
    plot_phases(name="recovery-standby", phases=phase_medians, order=PHASES,
                baseline=cold_total, target=STANDBY_TARGET_SECONDS,
                title="Driver kill -> first record, warm standby promoted (embedded mode)")
    data = {
        "scale": {"keys": ns.keys, "rate": ns.rate, "parallelism": 2,
                  "kill_after_checkpoints": ns.kill_after_checkpoints, "backoff": ns.backoff,
                  "repeat": ns.repeat, "spark_conf": ns.spark_conf},
        "embedded": recoveries, "cold_start": cold,
        "median": {"total_s": total, "phases_s": phase_medians, "cold_start_s": cold_total,
                   "ratio": ratio},
        "target": {"seconds": STANDBY_TARGET_SECONDS, "ratio": STANDBY_TARGET_RATIO,
                   "met": met},
    }
    write_result("recovery-standby", data)
    update_summary({
        "recovery_standby_seconds": target_entry(
            value=total, target=STANDBY_TARGET_SECONDS,
            unit="s from driver SIGKILL to first record, warm standby promoted (embedded)",
            met=met, baseline=cold_total,
            note=f"also <= {STANDBY_TARGET_RATIO}x the cold start of the same run "
                 f"(baseline); phases in recovery-standby.json"),
    })
    return data


def measure_cold_start(ns: argparse.Namespace) -> dict[str, Any]:
    """The baseline: ``cjob run`` of the same job until its first record, no restore."""
    work = fresh_dir("recovery-cold")
    name = "bench-cold-start"
    started = time.time()
    runner = _Runner(job_file=_job_file(work, name=name, ns=ns), state_dir=work / "state")
    pids: list[int] = []
    try:
        def running() -> dict[str, Any] | None:
            status = _read_json(work / "state" / name / "attempt-1.progress.json")
            if status and "firstRecordAt" in status.get("timeline", {}):
                return status
            return None

        status = _wait_for(running, timeout=ns.timeout, runner=runner, what="a cold start")
        pids.append(int(status["pid"]))
    finally:
        runner.stop(pids)
    remove_dir(work)
    t = status["timeline"]
    return {"total_s": float(t["firstRecordAt"]) - started,
            "spark_start_s": float(t["sparkReadyAt"]) - float(t["sparkStartingAt"])}


def run(ns: argparse.Namespace) -> dict[str, Any]:
    if ns.kill == "subtask":
        return run_subtask_kill(ns)
    recoveries: list[dict[str, Any]] = []
    cold: list[dict[str, Any]] = []
    for i in range(ns.repeat):
        print(f"[recovery] repetition {i + 1}/{ns.repeat}: kill and recover", flush=True)
        recoveries.append(measure_recovery(ns))
        r = recoveries[-1]
        print(f"[recovery]   {r['total_s']:.1f}s to the first record after restoring "
              f"checkpoint {r['restored_from']}", flush=True)
        print(f"[recovery] repetition {i + 1}/{ns.repeat}: cold start", flush=True)
        cold.append(measure_cold_start(ns))
        print(f"[recovery]   {cold[-1]['total_s']:.1f}s to the first record", flush=True)
    phase_medians = {p: median(r["phases_s"][p] for r in recoveries) for p in PHASES}
    total = median(r["total_s"] for r in recoveries)
    cold_total = median(c["total_s"] for c in cold)
    rows = [[p, *[r["phases_s"][p] for r in recoveries], phase_medians[p]] for p in PHASES]
    rows.append(["total (kill -> first record)", *[r["total_s"] for r in recoveries], total])
    rows.append(["baseline: cold start -> first record", *[c["total_s"] for c in cold],
                 cold_total])
    print_table("recovery (embedded mode, seconds)",
                ["phase", *[f"#{i + 1}" for i in range(len(recoveries))], "median"], rows)
    if ns.standby:
        return _report_standby(ns, recoveries=recoveries, cold=cold, total=total,
                               cold_total=cold_total, phase_medians=phase_medians)
    met = total <= TARGET_SECONDS
    plot_phases(name="recovery", phases=phase_medians, order=PHASES, baseline=cold_total,
                target=TARGET_SECONDS, title="Driver kill -> first record after restore (embedded mode)")
    data = {
        "scale": {"keys": ns.keys, "rate": ns.rate, "parallelism": 2,
                  "kill_after_checkpoints": ns.kill_after_checkpoints, "backoff": ns.backoff,
                  "repeat": ns.repeat, "checkpoint_interval_s": 1.0,
                  "spark_conf": ns.spark_conf},
        "embedded": recoveries, "cold_start": cold,
        "median": {"total_s": total, "phases_s": phase_medians, "cold_start_s": cold_total},
        "operator": {"note": "measured by python -m bench recovery-operator "
                             "(recovery-operator.json)"},
        "target": {"seconds": TARGET_SECONDS, "met": met},
    }
    write_result("recovery", data)
    update_summary({
        "recovery_embedded_seconds": target_entry(
            value=total, target=TARGET_SECONDS,
            unit="s from driver SIGKILL to first record processed after restore (embedded)",
            met=met, baseline=cold_total,
            note="baseline: cold start of the same job to its first record; phases in "
                 "recovery.json"),
    })
    return data
