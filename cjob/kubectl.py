"""``kubectl cjob``: the CheckpointedJobs of a cluster, the way kubectl users work.

Installed with the package as ``kubectl-cjob``, so ``kubectl cjob ...`` finds it on
``PATH``. Every command is a client of what the operator serves (see
:mod:`cjob.cluster_access`): reading a job's status, Events and checkpoint store, and
changing what the operator acts on (``spec.checkpoint.triggerNonce``, ``spec.suspend``,
the scale subresource, a CheckpointedJobSnapshot object). A command that asks for an
outcome (a checkpoint, a snapshot, a suspension, a new parallelism) waits for it by
default and says what came of it; ``--no-wait`` returns once the request is made.

kubectl's conventions: ``-n``/``--namespace``, ``--context``, ``--kubeconfig`` (before or
after the command; kubectl itself refuses flags before a plugin's name), ``-o
table|json|yaml``, exit 0 on success, 1 when the cluster says no or the outcome
failed, 2 for a mistake on the command line; every error is one line on standard error
and changes nothing. ``kubectl_complete-cjob`` completes commands and job names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from cjob import kubectl_changing, kubectl_reading, kubectl_state, views
from cjob.cluster_access import ClusterAccess, PluginError
from cjob_spec.durations import parse_duration_seconds
from cjob_spec.errors import CjobSpecError

PROG = "kubectl cjob"
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Usage mistakes: the usage line, then one ``error:`` line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _connection_flags(*, suppress: bool) -> _Parser:
    """-n, --context, --kubeconfig; taken before and after the command alike."""
    flags = _Parser(add_help=False,
                    argument_default=argparse.SUPPRESS if suppress else None)
    flags.add_argument("-n", "--namespace", help="the namespace (default: the context's)")
    flags.add_argument("--context", help="the kubeconfig context (default: the current one)")
    flags.add_argument("--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, "
                                            "then ~/.kube/config)")
    return flags


def _duration(text: str) -> float:
    try:
        return parse_duration_seconds(text)
    except CjobSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole(*, minimum: int) -> Callable[[str], int]:
    """An argument type: a whole number of at least ``minimum``."""
    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value}: must be at least {minimum}")
        return value
    return read


_positive = _whole(minimum=1)
_not_negative = _whole(minimum=0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, parents=[_connection_flags(suppress=False)],
                     description="Inspect and operate CheckpointedJobs on a cluster.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    connection = _connection_flags(suppress=True)

    def command(name: str, help_text: str, *, job: bool = True,
                output: bool = True) -> argparse.ArgumentParser:
        one = sub.add_parser(name, help=help_text, description=help_text,
                             parents=[connection])
        if job:
            one.add_argument("name", help="the CheckpointedJob")
        if output:
            one.add_argument("-o", "--output", choices=views.OUTPUTS, default="table")
        return one

    def waits(one: argparse.ArgumentParser, *, default: str) -> None:
        one.add_argument("--timeout", type=_duration, default=_duration(default),
                         help=f"how long to wait for the outcome (default {default})")
        one.add_argument("--no-wait", dest="wait", action="store_false",
                         help="return once the request is made")

    listing = command("list", "list the jobs: phase, attempt, checkpoint and its age",
                      job=False)
    listing.add_argument("-A", "--all-namespaces", action="store_true")
    status = command("status", "a job's status, conditions and recent Events")
    status.add_argument("--events", type=int, default=10, metavar="N",
                        help="how many of the latest Events to show (default 10)")
    command("checkpoints", "a job's retained checkpoints, from its checkpoint store")
    waits(command("checkpoint", "take a checkpoint now and wait for it to complete"),
          default="5m")
    snapshot = command("snapshot", "copy a retained checkpoint into a "
                                   "CheckpointedJobSnapshot that outlives the job")
    snapshot.add_argument("--name", dest="snapshot", metavar="SNAPSHOT",
                          help="the snapshot's name (default: <job>-<UTC time>)")
    snapshot.add_argument("--checkpoint", type=_positive, metavar="ID",
                          help="a retained checkpoint (default: the latest)")
    waits(snapshot, default="10m")
    waits(command("suspend", "take a final checkpoint and stop the job's pods",
                  output=False), default="5m")
    waits(command("resume", "start a suspended job from its final checkpoint",
                  output=False), default="5m")
    scale = command("scale", "change the parallelism (through the upgrade mode)",
                    output=False)
    scale.add_argument("replicas", type=_positive, metavar="PARALLELISM")
    waits(scale, default="10m")
    restore = command("restore", "start the job again from a retained checkpoint, a "
                                 "checkpoint path or a snapshot (a redeploy)", output=False)
    restore.add_argument("--from", dest="point", required=True, metavar="ID|PATH|SNAPSHOT",
                         help="a retained checkpoint's id (copied into a snapshot first, "
                              "so pruning cannot take it), a file:// or s3:// _metadata "
                              "path, or a CheckpointedJobSnapshot's name")
    waits(restore, default="10m")
    state = command("state", "a retained checkpoint's keyed state, read by a pod that "
                             "reaches the storage as the driver does")
    state.add_argument("--checkpoint", type=_positive, metavar="ID",
                       help="a retained checkpoint (default: the latest)")
    state.add_argument("--operator", metavar="UID",
                       help="the keyed operator whose state to show (default: list the "
                            "operators with state)")
    state.add_argument("--state", metavar="NAME",
                       help="only this state of the operator (a value_state or map_state "
                            "name, __timers...)")
    state.add_argument("--limit", type=_not_negative, default=20, metavar="ROWS",
                       help="rows of the table (default 20; 0: all)")
    state.add_argument("--timeout", type=_duration, default=_duration("5m"),
                       help="how long the reading pod may take (default 5m)")
    logs = command("logs", "the current attempt's driver log", output=False)
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("--tail", type=int, metavar="LINES",
                      help="only the last LINES lines")
    return parser


COMMAND_RUNNERS: dict[str, Callable[[ClusterAccess, argparse.Namespace], int]] = {
    "list": kubectl_reading.cmd_list, "status": kubectl_reading.cmd_status,
    "checkpoints": kubectl_reading.cmd_checkpoints, "logs": kubectl_reading.cmd_logs,
    "checkpoint": kubectl_changing.cmd_checkpoint, "snapshot": kubectl_changing.cmd_snapshot,
    "suspend": kubectl_changing.cmd_suspend, "resume": kubectl_changing.cmd_resume,
    "scale": kubectl_changing.cmd_scale, "restore": kubectl_changing.cmd_restore,
    "state": kubectl_state.cmd_state}


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        access = ClusterAccess(kubeconfig=ns.kubeconfig, context=ns.context,
                               namespace=ns.namespace)
        return COMMAND_RUNNERS[ns.command](access, ns)
    except PluginError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kubectl cjob logs NAME | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
