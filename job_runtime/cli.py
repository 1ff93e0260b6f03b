"""``python -m job_runtime run ...``: the driver's command line; ``cleanup ...``: the
deletion of a job's checkpoint directory (see :mod:`job_runtime.cleanup`).

The flags are the contract written down in :mod:`cjob_spec.runtime_args`; the
operator and the embedded runner build them from a CheckpointedJob.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from cjob_spec.exit_codes import ExitCode
from job_runtime.cleanup import DEFAULT_TERMINATION_LOG, run_cleanup
from job_runtime.coordinator.coordinator import CheckpointSettings
from job_runtime.execution.driver import DriverSettings, run_driver


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m job_runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job's driver")
    run.add_argument("--job-name", required=True)
    run.add_argument("--job-uid", required=True)
    run.add_argument("--entrypoint", required=True)
    run.add_argument("--python-path", action="append", default=[])
    run.add_argument("--args-json", default="{}")
    run.add_argument("--parallelism", type=int, default=1)
    run.add_argument("--max-parallelism", type=int, default=128)
    run.add_argument("--master", default="local[*]")
    run.add_argument("--spark-conf", action="append", type=_key_value, default=[])
    run.add_argument("--checkpoint-storage", required=True)
    run.add_argument("--checkpoint-interval", type=float, default=10.0)
    run.add_argument("--checkpoint-min-pause", type=float, default=0.0)
    run.add_argument("--checkpoint-timeout", type=float, default=600.0)
    run.add_argument("--checkpoint-mode", choices=["exactly_once", "at_least_once"],
                     default="exactly_once")
    run.add_argument("--unaligned", action="store_true")
    run.add_argument("--retained", type=int, default=3)
    run.add_argument("--tolerable-failures", type=int, default=0)
    run.add_argument("--restore", default="latest")
    run.add_argument("--on-unreadable", choices=["fail", "fallback"], default="fail")
    run.add_argument("--allow-foreign-restore", action="store_true")
    run.add_argument("--attempt", type=int, default=1)
    run.add_argument("--store", default="memory:")
    run.add_argument("--metrics-port", type=int, default=None)
    run.add_argument("--status-file", default=None)
    run.add_argument("--task-attempts", type=int, default=4)
    run.add_argument("--credits", type=int, default=4)
    cleanup = sub.add_parser("cleanup", help="delete a deleted job's checkpoint directory")
    cleanup.add_argument("--uri", required=True,
                         help="the job's checkpoint directory, <storage>/<job-name>-<job-uid>")
    cleanup.add_argument("--job-name", required=True)
    cleanup.add_argument("--job-uid", required=True)
    cleanup.add_argument("--termination-log", default=DEFAULT_TERMINATION_LOG,
                         help="where to write the one-line outcome for Kubernetes")
    return parser


def settings_from_args(ns: argparse.Namespace) -> DriverSettings:
    try:
        args = json.loads(ns.args_json)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--args-json is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise SystemExit("--args-json must be a JSON object")
    return DriverSettings(
        job_name=ns.job_name, job_uid=ns.job_uid, entrypoint=ns.entrypoint,
        python_path=tuple(ns.python_path), args=args, parallelism=ns.parallelism,
        max_parallelism=ns.max_parallelism, master=ns.master, spark_conf=dict(ns.spark_conf),
        checkpoint_storage=ns.checkpoint_storage,
        checkpoint=CheckpointSettings(interval=ns.checkpoint_interval,
                                      min_pause=ns.checkpoint_min_pause,
                                      timeout=ns.checkpoint_timeout,
                                      tolerable_failures=ns.tolerable_failures),
        mode=ns.checkpoint_mode, unaligned=ns.unaligned, retained=ns.retained,
        restore=ns.restore, on_unreadable=ns.on_unreadable,
        allow_foreign_restore=ns.allow_foreign_restore, attempt=ns.attempt, store=ns.store,
        metrics_port=ns.metrics_port, status_file=ns.status_file,
        task_attempts=ns.task_attempts, credits=ns.credits)


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
        return run_cleanup(uri=ns.uri, job_name=ns.job_name, job_uid=ns.job_uid,
                           termination_log=ns.termination_log)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        settings = settings_from_args(ns)
    except SystemExit as exc:
        sys.stderr.write(f"{exc}\n")
        return ExitCode.BAD_CONFIG
    return run_driver(settings)
