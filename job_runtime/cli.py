"""``python -m job_runtime run ...``: the driver's command line; ``cleanup ...``: the
deletion of a job's checkpoint directory (see :mod:`job_runtime.cleanup`);
``check-state ...``: whether a checkpoint's state fits a pipeline
(:mod:`job_runtime.state_check`); ``take-snapshot ...`` and ``dispose-snapshot ...``: a
CheckpointedJobSnapshot pod's work (:mod:`job_runtime.snapshot_pod`).

The flags are the contract written down in :mod:`cjob_spec.runtime_args`; the
operator and the embedded runner build them from a CheckpointedJob. A flag left out
means the spec's default (:mod:`cjob_spec.defaults`); flags no spec field sets (the
master, the attempt, the store, task attempts, credits) default to the driver's own
settings, so every default has one place.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from cjob_spec import defaults
from cjob_spec.exit_codes import ExitCode
from cjob_spec.model import (
    DEFAULT_CHECKPOINT_MODE,
    DEFAULT_ON_UNREADABLE,
    CheckpointMode,
    OnUnreadable,
    StateBackend,
)
from job_runtime.cleanup import DEFAULT_TERMINATION_LOG, run_cleanup
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.run import run_driver
from job_runtime.execution.driver.store import StoreAddress, StoreKind
from job_runtime.snapshot_pod import dispose_snapshot, report, take_snapshot
from job_runtime.state_check import check_state, parse_args_json


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(ExitCode.BAD_CONFIG)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


_DRIVER = DriverSettings(job_name="", job_uid="", entrypoint="")
"""The driver's defaults of the settings no spec field sets."""


def _seconds(field: defaults.DurationField) -> float:
    return field.default_value().seconds


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m job_runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job's driver")
    run.add_argument("--job-name", required=True)
    run.add_argument("--job-uid", required=True)
    run.add_argument("--entrypoint", required=True)
    run.add_argument("--python-path", action="append", default=[])
    run.add_argument("--args-json", default="{}")
    run.add_argument("--parallelism", type=int, default=defaults.PARALLELISM.default)
    run.add_argument("--max-parallelism", type=int, default=defaults.MAX_PARALLELISM.default)
    run.add_argument("--master", default=_DRIVER.master)
    run.add_argument("--spark-conf", action="append", type=_key_value, default=[])
    run.add_argument("--checkpoint-storage", required=True)
    run.add_argument("--checkpoint-interval", type=float,
                     default=_seconds(defaults.CHECKPOINT_INTERVAL))
    run.add_argument("--checkpoint-min-pause", type=float,
                     default=_seconds(defaults.CHECKPOINT_MIN_PAUSE))
    run.add_argument("--checkpoint-timeout", type=float,
                     default=_seconds(defaults.CHECKPOINT_TIMEOUT))
    run.add_argument("--checkpoint-mode", choices=[mode.runtime_flag for mode in CheckpointMode],
                     default=DEFAULT_CHECKPOINT_MODE.runtime_flag)
    run.add_argument("--unaligned", action="store_true")
    run.add_argument("--retained", type=int, default=defaults.RETAINED.default)
    run.add_argument("--tolerable-failures", type=int,
                     default=defaults.TOLERABLE_FAILURES.default)
    run.add_argument("--checkpoint-stall-intervals", type=int,
                     default=defaults.CHECKPOINT_STALL_INTERVALS.default)
    run.add_argument("--sink-stall-timeout", type=float,
                     default=_seconds(defaults.SINK_STALL_TIMEOUT))
    run.add_argument("--restore", default=defaults.RESTORE_FROM.default)
    run.add_argument("--on-unreadable", choices=[choice.runtime_flag for choice in OnUnreadable],
                     default=DEFAULT_ON_UNREADABLE.runtime_flag)
    run.add_argument("--allow-foreign-restore", action="store_true")
    run.add_argument("--allow-non-restored-state", action="store_true")
    run.add_argument("--attempt", type=int, default=_DRIVER.attempt)
    run.add_argument("--store", default=_DRIVER.store.text)
    run.add_argument("--metrics-port", type=int, default=None)
    run.add_argument("--status-file", default=None)
    run.add_argument("--task-attempts", type=int, default=_DRIVER.task_attempts)
    run.add_argument("--credits", type=int, default=_DRIVER.credits)
    run.add_argument("--state-backend", choices=[b.value for b in StateBackend],
                     default=_DRIVER.state_backend.value)
    run.add_argument("--state-dir", default=_DRIVER.state_dir,
                     help="local working directory of the rocksdb state backend")
    run.add_argument("--standby", default=None, metavar="PROMOTION_FILE",
                     help="wait as a warm standby (Spark started, job code loaded) until "
                          "PROMOTION_FILE names the attempt to take over")
    run.add_argument("--standby-pod", default=None, metavar="POD",
                     help="wait as the warm standby pod POD until the ConfigMap store "
                          "records its promotion (set by the operator)")
    run.add_argument("--standby-ready-file", default=None, metavar="PATH",
                     help="with --standby-pod: the file written once the standby is ready "
                          "(a relative PATH is in the temporary directory)")
    run.add_argument("--beacon-host", default=None, metavar="ADDRESS",
                     help="with a configmap store: listen at ADDRESS for standby drivers, "
                          "which then hear of this driver's death at once (set by the "
                          "operator)")
    check = sub.add_parser("check-state", help="whether a checkpoint's state fits a job's "
                                               "pipeline (exit 0) or not (exit 10)")
    check.add_argument("--entrypoint", required=True)
    check.add_argument("--python-path", action="append", default=[])
    check.add_argument("--args-json", default="{}")
    check.add_argument("--checkpoint", required=True,
                       help="a checkpoint's _metadata, or its chk-<id> directory")
    cleanup = sub.add_parser("cleanup", help="delete a deleted job's checkpoint directories")
    cleanup.add_argument("--uri", required=True, action="append", dest="uris",
                         help="a checkpoint directory of the job, <storage>/<job-name>-<job-uid>;"
                              " once for every storage the job used")
    cleanup.add_argument("--job-name", required=True)
    cleanup.add_argument("--job-uid", required=True)
    cleanup.add_argument("--termination-log", default=DEFAULT_TERMINATION_LOG,
                         help="where to write the one-line outcome for Kubernetes")
    take = sub.add_parser("take-snapshot", help="copy a completed checkpoint into a "
                                                "CheckpointedJobSnapshot's directory")
    take.add_argument("--checkpoint", required=True, help="the checkpoint's _metadata")
    dispose = sub.add_parser("dispose-snapshot", help="delete a CheckpointedJobSnapshot's "
                                                      "directory")
    for command in (take, dispose):
        command.add_argument("--target", required=True,
                             help="the snapshot's directory, <storage>/snapshots/<name>-<uid>")
        command.add_argument("--snapshot-name", required=True)
        command.add_argument("--snapshot-uid", required=True)
        command.add_argument("--termination-log", default=DEFAULT_TERMINATION_LOG,
                             help="where to write the outcome (JSON) for Kubernetes")
    return parser


_MODES = {mode.runtime_flag: mode for mode in CheckpointMode}
_ON_UNREADABLE = {choice.runtime_flag: choice for choice in OnUnreadable}
"""The command line's words for the spec's enums, read back into them."""


def settings_from_args(ns: argparse.Namespace) -> DriverSettings:
    try:
        args = json.loads(ns.args_json)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--args-json is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise SystemExit("--args-json must be a JSON object")
    store = StoreAddress.parse(ns.store)
    if ns.beacon_host is not None and store.kind is not StoreKind.CONFIGMAP:
        # The beacon's address is recorded where standbys watch: the ConfigMap store.
        raise SystemExit(f"--beacon-host needs a configmap:NAMESPACE/NAME store, "
                         f"got --store {ns.store!r}")
    return DriverSettings(
        job_name=ns.job_name, job_uid=ns.job_uid, entrypoint=ns.entrypoint,
        python_path=tuple(ns.python_path), args=args, parallelism=ns.parallelism,
        max_parallelism=ns.max_parallelism, master=ns.master, spark_conf=dict(ns.spark_conf),
        checkpoint_storage=ns.checkpoint_storage,
        checkpoint=CheckpointSettings(interval=ns.checkpoint_interval,
                                      min_pause=ns.checkpoint_min_pause,
                                      timeout=ns.checkpoint_timeout,
                                      tolerable_failures=ns.tolerable_failures,
                                      stall_intervals=ns.checkpoint_stall_intervals),
        sink_stall_timeout=ns.sink_stall_timeout,
        mode=_MODES[ns.checkpoint_mode], unaligned=ns.unaligned, retained=ns.retained,
        restore=ns.restore, on_unreadable=_ON_UNREADABLE[ns.on_unreadable],
        allow_foreign_restore=ns.allow_foreign_restore,
        allow_non_restored_state=ns.allow_non_restored_state, attempt=ns.attempt, store=store,
        metrics_port=ns.metrics_port, status_file=ns.status_file,
        task_attempts=ns.task_attempts, credits=ns.credits,
        state_backend=StateBackend(ns.state_backend),
        state_dir=ns.state_dir, standby_file=ns.standby, standby_pod=ns.standby_pod,
        standby_ready_file=ns.standby_ready_file, beacon_host=ns.beacon_host)


def exit_on_sigterm() -> None:
    """Die of SIGTERM as any process would, also as a container's PID 1.

    The kernel drops a signal whose action is the default for the first process of a
    PID namespace. A driver started as a pod's command is that process, so without
    a handler a deleted driver pod waits its whole grace period and is then killed.
    The exit is immediate, like the default action: the checkpoints in the store,
    not a shutdown path, are what the next attempt relies on.
    """
    signal.signal(signal.SIGTERM, lambda signum, _frame: os._exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    exit_on_sigterm()
    ns = build_parser().parse_args(argv)
    if ns.command == "cleanup":
        # No INFO logging: the command's outcome is its one last line.
        return run_cleanup(uris=ns.uris, job_name=ns.job_name, job_uid=ns.job_uid,
                           termination_log=ns.termination_log)
    if ns.command == "take-snapshot":
        outcome, code = take_snapshot(checkpoint=ns.checkpoint, target=ns.target,
                                      snapshot_name=ns.snapshot_name,
                                      snapshot_uid=ns.snapshot_uid)
        return report(outcome, code, termination_log=ns.termination_log)
    if ns.command == "dispose-snapshot":
        outcome, code = dispose_snapshot(target=ns.target, snapshot_name=ns.snapshot_name,
                                         snapshot_uid=ns.snapshot_uid)
        return report(outcome, code, termination_log=ns.termination_log)
    if ns.command == "check-state":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        try:
            args = parse_args_json(ns.args_json)
        except ValueError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return ExitCode.BAD_CONFIG
        return check_state(entrypoint=ns.entrypoint, python_path=ns.python_path, args=args,
                           checkpoint=ns.checkpoint)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        settings = settings_from_args(ns)
    except SystemExit as exc:
        sys.stderr.write(f"{exc}\n")
        return ExitCode.BAD_CONFIG
    return run_driver(settings)
