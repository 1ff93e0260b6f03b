"""``python -m job_runtime run ...``: the driver's command line; ``cleanup ...``: the
deletion of a job's checkpoint directory (see :mod:`job_runtime.cleanup`);
``check-state ...``: whether a checkpoint's state fits a pipeline
(:mod:`job_runtime.state_check`); ``state ...``: a checkpoint's keyed state, printed
(:mod:`job_runtime.state_show`); ``take-snapshot ...`` and ``dispose-snapshot ...``: a
CheckpointedJobSnapshot pod's work (:mod:`job_runtime.snapshot_pod`).

The operator and the embedded runner pass the attempt's settings as one typed,
versioned document, ``--settings`` (:mod:`cjob_spec.runtime_settings`, built by
:mod:`cjob_spec.runtime_args`). The same fields as flags serve a command line written
by hand; a field left out takes the document's default (the spec's, from
:mod:`cjob_spec.defaults`), so every default has one place. The flags of the
process's role (standby, beacon) and the driver's own knobs (task attempts, credits,
the RocksDB directory) sit beside either.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys

from cjob_spec.exit_codes import ExitCode
from cjob_spec.model import CheckpointMode, OnUnreadable, StateBackend
from cjob_spec.runtime_settings import RuntimeSettings, RuntimeSettingsError
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.execution.driver.driver_settings import DriverSettings
from job_runtime.execution.driver.store import StoreAddress, StoreKind

# Each command imports what it runs when it runs: a driver starts Spark's JVM first and
# imports the engine while the JVM starts (see ``main``).
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
"""Where Kubernetes reads a container's termination message (the cleanup and snapshot
pods' outcome)."""

STATE_FORMATS = ("table", "json", "csv")
STATE_LIMIT = 20
"""Rows of ``state``'s table unless ``--limit`` says otherwise (JSON and CSV hold all)."""


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


_MODES = {mode.runtime_flag: mode for mode in CheckpointMode}
_ON_UNREADABLE = {choice.runtime_flag: choice for choice in OnUnreadable}
"""The command line's words for the spec's enums, read back into them."""

JOB_FLAGS = {
    "job_name": "--job-name", "job_uid": "--job-uid", "entrypoint": "--entrypoint",
    "checkpoint_storage": "--checkpoint-storage",
}
"""The flags a command line without ``--settings`` must give (the document's required
fields)."""


def _job_flags(run: argparse.ArgumentParser) -> None:
    """The settings document's fields as flags, for a command line written by hand. They
    default to nothing: what is left out takes the document's default."""
    quiet = argparse.SUPPRESS
    for flag in JOB_FLAGS.values():
        run.add_argument(flag, default=quiet)
    run.add_argument("--python-path", action="append", default=quiet)
    run.add_argument("--args-json", default=quiet)
    run.add_argument("--parallelism", type=int, default=quiet)
    run.add_argument("--max-parallelism", type=int, default=quiet)
    run.add_argument("--master", default=quiet)
    run.add_argument("--spark-conf", action="append", type=_key_value, default=quiet)
    run.add_argument("--checkpoint-interval", type=float, default=quiet)
    run.add_argument("--checkpoint-min-pause", type=float, default=quiet)
    run.add_argument("--checkpoint-timeout", type=float, default=quiet)
    run.add_argument("--checkpoint-mode", choices=list(_MODES), default=quiet)
    run.add_argument("--unaligned", action="store_true", default=quiet)
    run.add_argument("--retained", type=int, default=quiet)
    run.add_argument("--tolerable-failures", type=int, default=quiet)
    run.add_argument("--checkpoint-stall-intervals", type=int, default=quiet)
    run.add_argument("--sink-stall-timeout", type=float, default=quiet)
    run.add_argument("--restore", default=quiet)
    run.add_argument("--restore-exact", action="store_true", default=quiet,
                     help="restore --restore itself even when the store holds newer "
                          "checkpoints (a redeploy)")
    run.add_argument("--on-unreadable", choices=list(_ON_UNREADABLE), default=quiet)
    run.add_argument("--allow-foreign-restore", action="store_true", default=quiet)
    run.add_argument("--allow-non-restored-state", action="store_true", default=quiet)
    run.add_argument("--state-backend", choices=[b.value for b in StateBackend], default=quiet)
    run.add_argument("--attempt", type=int, default=quiet)
    run.add_argument("--store", default=quiet)
    run.add_argument("--metrics-port", type=int, default=quiet)
    run.add_argument("--status-file", default=quiet)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m job_runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job's driver")
    run.add_argument("--settings", default=None, metavar="JSON",
                     help="the attempt's settings as one document (what the operator and "
                          "cjob run pass; see cjob_spec.runtime_settings), instead of the "
                          "flags below")
    _job_flags(run)
    run.add_argument("--task-attempts", type=int, default=_DRIVER.task_attempts)
    run.add_argument("--credits", type=int, default=_DRIVER.credits)
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
    state = sub.add_parser("state", help="print a checkpoint's keyed state (the operators "
                                         "with state, or one operator's state)")
    state.add_argument("--checkpoint", required=True,
                       help="a checkpoint's (or a snapshot's) _metadata, or its chk-<id> "
                            "directory")
    state.add_argument("--operator", default=None, metavar="UID",
                       help="the keyed operator (default: list those with state)")
    state.add_argument("--state", default=None, metavar="NAME",
                       help="only this state of the operator")
    state.add_argument("-o", "--output", choices=STATE_FORMATS, default="table")
    state.add_argument("--limit", type=int, default=STATE_LIMIT, metavar="ROWS",
                       help=f"rows of the table (default {STATE_LIMIT}; 0: all)")
    state.add_argument("--python-path", action="append", default=[],
                       help="a directory of the job's code, for the classes its state holds")
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


def runtime_settings_of(ns: argparse.Namespace) -> RuntimeSettings:
    """The attempt's settings: the ``--settings`` document, or the flags given."""
    given = {name: value for name, value in vars(ns).items() if name in _FIELDS}
    if ns.settings is not None:
        if given:
            flags = ", ".join(sorted("--" + name.replace("_", "-") for name in given))
            raise SystemExit(f"give the settings either as --settings or as flags, not "
                             f"both (also given: {flags})")
        try:
            return RuntimeSettings.decode(ns.settings)
        except RuntimeSettingsError as exc:
            raise SystemExit(str(exc)) from None
    missing = [flag for name, flag in JOB_FLAGS.items() if name not in given]
    if missing:
        raise SystemExit(f"the following arguments are required: {', '.join(missing)} "
                         f"(or --settings)")
    if "args_json" in given:
        try:
            given["args"] = json.loads(given.pop("args_json"))
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--args-json is not valid JSON: {exc}") from None
        if not isinstance(given["args"], dict):
            raise SystemExit("--args-json must be a JSON object")
    if "spark_conf" in given:
        given["spark_conf"] = dict(given["spark_conf"])
    # The flags spell the two modes as the runtime always did; the document, as the spec.
    if "checkpoint_mode" in given:
        given["checkpoint_mode"] = _MODES[given["checkpoint_mode"]].value
    if "on_unreadable" in given:
        given["on_unreadable"] = _ON_UNREADABLE[given["on_unreadable"]].value
    try:
        return RuntimeSettings.from_fields(given)
    except RuntimeSettingsError as exc:
        raise SystemExit(str(exc)) from None


_FIELDS = {field.name for field in dataclasses.fields(RuntimeSettings)} | {"args_json"}


def settings_from_args(ns: argparse.Namespace) -> DriverSettings:
    runtime = runtime_settings_of(ns)
    store = StoreAddress.parse(runtime.store)
    if ns.beacon_host is not None and store.kind is not StoreKind.CONFIGMAP:
        # The beacon's address is recorded where standbys watch: the ConfigMap store.
        raise SystemExit(f"--beacon-host needs a configmap:NAMESPACE/NAME store, "
                         f"got the store {runtime.store!r}")
    return DriverSettings(
        job_name=runtime.job_name, job_uid=runtime.job_uid, entrypoint=runtime.entrypoint,
        python_path=runtime.python_path, args=dict(runtime.args),
        parallelism=runtime.parallelism, max_parallelism=runtime.max_parallelism,
        master=runtime.master, spark_conf=dict(runtime.spark_conf),
        checkpoint_storage=runtime.checkpoint_storage,
        checkpoint=CheckpointSettings(interval=runtime.checkpoint_interval,
                                      min_pause=runtime.checkpoint_min_pause,
                                      timeout=runtime.checkpoint_timeout,
                                      tolerable_failures=runtime.tolerable_failures,
                                      stall_intervals=runtime.checkpoint_stall_intervals),
        sink_stall_timeout=runtime.sink_stall_timeout,
        mode=runtime.checkpoint_mode, unaligned=runtime.unaligned, retained=runtime.retained,
        restore=runtime.restore, restore_exact=runtime.restore_exact,
        on_unreadable=runtime.on_unreadable,
        allow_foreign_restore=runtime.allow_foreign_restore,
        allow_non_restored_state=runtime.allow_non_restored_state, attempt=runtime.attempt,
        store=store, metrics_port=runtime.metrics_port, status_file=runtime.status_file,
        task_attempts=ns.task_attempts, credits=ns.credits,
        state_backend=runtime.state_backend, state_dir=ns.state_dir,
        standby_file=ns.standby, standby_pod=ns.standby_pod,
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
        from job_runtime.cleanup import run_cleanup

        # No INFO logging: the command's outcome is its one last line.
        return run_cleanup(uris=ns.uris, job_name=ns.job_name, job_uid=ns.job_uid,
                           termination_log=ns.termination_log)
    if ns.command in ("take-snapshot", "dispose-snapshot"):
        return _snapshot_command(ns)
    if ns.command == "state":
        from job_runtime.execution.entrypoint import add_python_path
        from job_runtime.state_show import show_state

        add_python_path(ns.python_path)
        return show_state(checkpoint=ns.checkpoint, operator=ns.operator, state=ns.state,
                          output=ns.output, limit=ns.limit or None)
    if ns.command == "check-state":
        from job_runtime.state_check import check_state, parse_args_json

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
    # Spark's JVM first, on its own thread: the engine's imports below (about a third of
    # a second) and the job's loading then overlap its start.
    from job_runtime.execution.driver.spark_start import start_early

    spark = start_early(settings)
    from job_runtime.execution.driver.run import run_driver

    return run_driver(settings, spark=spark)


def _snapshot_command(ns: argparse.Namespace) -> int:
    from job_runtime.snapshot_pod import dispose_snapshot, report, take_snapshot

    if ns.command == "take-snapshot":
        outcome, code = take_snapshot(checkpoint=ns.checkpoint, target=ns.target,
                                      snapshot_name=ns.snapshot_name,
                                      snapshot_uid=ns.snapshot_uid)
        return report(outcome, code, termination_log=ns.termination_log)
    outcome, code = dispose_snapshot(target=ns.target, snapshot_name=ns.snapshot_name,
                                     snapshot_uid=ns.snapshot_uid)
    return report(outcome, code, termination_log=ns.termination_log)
