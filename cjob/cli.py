"""``cjob``: run a CheckpointedJob locally and inspect its status and checkpoints.

Every user mistake ends with one line on standard error and a non-zero exit
code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cjob import views
from cjob.embedded import RunOptions
from cjob_spec import CheckpointedJob, CjobSpecError, load_job_file
from cjob_spec.model import is_s3_code

if TYPE_CHECKING:
    from cjob_checkpoint.store.completed_store import CompletedCheckpoint

EXIT_USAGE = 2
DEFAULT_STATE_DIR = RunOptions().state_dir
"""Where ``run`` keeps a job's state and ``status``/``checkpoints`` look for it: the
embedded runner's default, so the commands agree with it and with each other."""


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    sys.stderr.write(f"cjob: error: {message}\n")
    return code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise SystemExit(_fail(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cjob", description="Run and inspect CheckpointedJobs.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a CheckpointedJob on this machine (embedded mode)")
    run.add_argument("file", help="CheckpointedJob YAML")
    run.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                     help=f"where state lives (default {DEFAULT_STATE_DIR})")
    run.add_argument("--kill-driver-after", type=float, metavar="SECONDS",
                     help="SIGKILL the driver once, after SECONDS and a completed checkpoint")
    run.add_argument("--fresh", action="store_true",
                     help="start over instead of resuming an unfinished run of the same job")
    run.add_argument("--metrics-port", type=int, help="serve driver metrics on this port")

    status = sub.add_parser("status", help="show a job's status")
    status.add_argument("name")
    status.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    status.add_argument("-o", "--output", choices=views.OUTPUTS, default="table")

    checkpoints = sub.add_parser("checkpoints", help="checkpoint commands")
    csub = checkpoints.add_subparsers(dest="checkpoints_command", required=True)
    listing = csub.add_parser("list", help="list a job's retained checkpoints")
    listing.add_argument("name")
    listing.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    listing.add_argument("-o", "--output", choices=views.OUTPUTS, default="table")

    snapshot = sub.add_parser("snapshot", help="copy a job's checkpoint into a snapshot that "
                                               "outlives the job's checkpoints")
    snapshot.add_argument("name", help="the job")
    snapshot.add_argument("--snapshot", required=True, metavar="SNAPSHOT",
                          help="the snapshot's name (letters, digits, '.', '_', '-')")
    snapshot.add_argument("--checkpoint", type=int, metavar="ID",
                          help="a retained checkpoint (default: the latest)")
    snapshot.add_argument("--to", metavar="DIRECTORY",
                          help="where snapshots are kept (default: <state-dir>/<job>/snapshots)")
    snapshot.add_argument("--state-dir", default=DEFAULT_STATE_DIR)

    state = sub.add_parser("state", help="a checkpoint's keyed state")
    ssub = state.add_subparsers(dest="state_command", required=True)
    show = ssub.add_parser("show", help="list the operators with state in a checkpoint, or "
                                        "print one operator's state")
    show.add_argument("name", nargs="?", help="a local job (default checkpoint: its latest)")
    show.add_argument("--checkpoint", metavar="ID|PATH",
                      help="a retained checkpoint's id of the job, or a checkpoint's (or "
                           "snapshot's) _metadata or chk-<id> directory")
    show.add_argument("--operator", metavar="UID",
                      help="the keyed operator (default: list those with state)")
    show.add_argument("--state", metavar="NAME", help="only this state of the operator")
    show.add_argument("-o", "--output", choices=("table", "json", "csv"), default="table")
    show.add_argument("--limit", type=int, default=20, metavar="ROWS",
                      help="rows of the table (default 20; 0: all)")
    show.add_argument("--python-path", action="append", default=[], metavar="DIR",
                      help="a directory of the job's code, for the classes its state holds")
    show.add_argument("--state-dir", default=DEFAULT_STATE_DIR)

    validate = sub.add_parser("validate", help="check a CheckpointedJob YAML")
    validate.add_argument("file")
    validate.add_argument("--against", metavar="CHECKPOINT",
                          help="also check that this checkpoint's state (its _metadata, its "
                               "chk-<id> directory, or 'latest': the local job's latest "
                               "retained one) fits the job's pipeline, as a restore would: "
                               "the job's code is loaded from its local pythonPath")
    validate.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                          help="where --against latest finds the job")
    return parser


def _job_dir(state_dir: str, name: str) -> Path | None:
    path = Path(state_dir) / name
    return path if path.is_dir() else None


def cmd_run(ns: argparse.Namespace) -> int:
    from cjob.embedded import EmbeddedRunner, StateDirError

    try:
        job = load_job_file(ns.file)
    except CjobSpecError as exc:
        return _fail(str(exc))
    if job.spec.restore.source.snapshot is not None:
        return _fail("spec.restore.snapshot: names a CheckpointedJobSnapshot object, which "
                     "only the operator resolves; locally, set spec.restore.from to the "
                     "snapshot's _metadata path (cjob snapshot prints it)")
    if job.spec.snapshots.in_use:
        return _fail("spec.snapshots: snapshot objects are the operator's; locally, take one "
                     "with cjob snapshot")
    options = RunOptions(state_dir=ns.state_dir, kill_driver_after=ns.kill_driver_after,
                         fresh=ns.fresh, metrics_port=ns.metrics_port,
                         base_dir=str(Path(ns.file).resolve().parent),
                         interactive=sys.stdout.isatty())
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return EmbeddedRunner(job=job, options=options).run()
    except StateDirError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt as exc:
        sys.stderr.write("\ncjob: interrupted; run the same command again to resume\n")
        return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the drivers run in process groups of their own and
    would outlive a runner that just died, so the runner stops them first."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def cmd_status(ns: argparse.Namespace) -> int:
    directory = _job_dir(ns.state_dir, ns.name)
    if directory is None or not (directory / "status.json").exists():
        return _fail(f"no job {ns.name!r} in {ns.state_dir} (run it with cjob run first)", 1)
    status: dict[str, Any] = json.loads((directory / "status.json").read_text())
    output = views.Output(ns.output)
    if output is not views.Output.TABLE:
        print(views.dump(status, output=output))
        return 0
    print(views.status_fields(name=ns.name, status=status, now=datetime.now(UTC)))
    return 0


def _retained(directory: Path) -> list[CompletedCheckpoint]:
    """The retained checkpoints in a local job's store (none before its first); raises
    ``StoreError`` for a store that cannot be read."""
    from cjob_checkpoint.store import list_checkpoints

    store = directory / "store"
    return list_checkpoints(str(store), skip_corrupt=True) if store.exists() else []


def cmd_checkpoints_list(ns: argparse.Namespace) -> int:
    from cjob_checkpoint.store import StoreError

    directory = _job_dir(ns.state_dir, ns.name)
    if directory is None:
        return _fail(f"no job {ns.name!r} in {ns.state_dir}", 1)
    try:
        checkpoints = _retained(directory)
    except StoreError as exc:
        return _fail(str(exc), 1)
    output = views.Output(ns.output)
    if output is not views.Output.TABLE:
        print(views.dump(views.checkpoint_data(checkpoints), output=output))
        return 0
    print(views.checkpoint_table(checkpoints, now=datetime.now(UTC)))
    if not checkpoints:
        print("(no retained checkpoints)")
    return 0


def cmd_snapshot(ns: argparse.Namespace) -> int:
    """Copy a retained checkpoint of a local job into ``<to>/<snapshot>/``: a snapshot
    that ``spec.restore.from`` restores into this job or a new one, whatever happens to
    the job's checkpoints."""
    from cjob_checkpoint.checkpoint_storage import ensure_safe_segment
    from cjob_checkpoint.metadata import MetadataError
    from cjob_checkpoint.snapshot import snapshot_checkpoint
    from cjob_checkpoint.storage.errors import StorageError
    from cjob_checkpoint.storage.factory import get_filesystem
    from cjob_checkpoint.store import StoreError
    from cjob_checkpoint.store.backed import hold_checkpoint, release_checkpoint
    from cjob_checkpoint.store.completed_store import UnreadableCheckpointError
    from cjob_checkpoint.store.file import FileBackend

    directory = _job_dir(ns.state_dir, ns.name)
    if directory is None:
        return _fail(f"no job {ns.name!r} in {ns.state_dir}", 1)
    try:
        ensure_safe_segment(ns.snapshot, what="the snapshot name")
    except StorageError:
        return _fail(f"snapshot name {ns.snapshot!r}: use letters, digits, '.', '_' and '-', "
                     f"starting with a letter or digit")
    try:
        checkpoints = _retained(directory)
    except StoreError as exc:
        return _fail(str(exc), 1)
    if ns.checkpoint is not None:
        checkpoints = [c for c in checkpoints if c.checkpoint_id == ns.checkpoint]
    if not checkpoints:
        which = "no retained checkpoint" if ns.checkpoint is None else \
            f"no retained checkpoint {ns.checkpoint}"
        return _fail(f"job {ns.name!r} has {which} (cjob checkpoints list {ns.name})", 1)
    chosen = max(checkpoints, key=lambda c: c.checkpoint_id)
    root = Path(ns.to) if ns.to else directory / "snapshots"
    target = (root / ns.snapshot).resolve()
    if target.exists():
        return _fail(f"snapshot {ns.snapshot!r} exists already at {target}", 1)
    # A running job prunes as it checkpoints: hold the checkpoint while it is copied.
    backend = FileBackend(str(directory / "store"))
    holder = f"cjob-snapshot-{ns.snapshot}-{os.getpid()}"
    try:
        if not hold_checkpoint(backend, where=backend.directory, holder=holder,
                               checkpoint_id=chosen.checkpoint_id, by=f"snapshot {ns.snapshot}"):
            return _fail(f"checkpoint {chosen.checkpoint_id} was pruned meanwhile; take the "
                         f"snapshot again", 1)
        try:
            taken = snapshot_checkpoint(checkpoint=chosen.metadata_path,
                                        target=target.as_uri(), name=ns.snapshot,
                                        source_fs=get_filesystem(chosen.metadata_path),
                                        target_fs=get_filesystem(target.as_uri()))
        finally:
            release_checkpoint(backend, where=backend.directory, holder=holder)
    except UnreadableCheckpointError as exc:
        return _fail(f"checkpoint {chosen.checkpoint_id} cannot be read: {exc.cause}", 1)
    except (StorageError, MetadataError, StoreError) as exc:
        return _fail(f"checkpoint {chosen.checkpoint_id} could not be copied: {exc}", 1)
    print(f"snapshot {ns.snapshot} of checkpoint {chosen.checkpoint_id}: {taken.files} files, "
          f"{taken.size_bytes} bytes")
    print(f"restore it with spec.restore.from: {taken.metadata_uri}")
    return 0


def cmd_validate(ns: argparse.Namespace) -> int:
    try:
        job = load_job_file(ns.file)
    except CjobSpecError as exc:
        return _fail(str(exc))
    print(f"{ns.file}: CheckpointedJob {job.metadata.name} is valid")
    if ns.against is None:
        return 0
    checkpoint = ns.against
    if checkpoint == "latest":
        found = _latest_checkpoint(ns.state_dir, job.metadata.name)
        if found is None:
            return _fail(f"job {job.metadata.name!r} has no retained checkpoint in "
                         f"{ns.state_dir} (run it with cjob run first, or name a checkpoint)",
                         1)
        checkpoint = found
    return _check_state(job, job_file=Path(ns.file), checkpoint=checkpoint)


def _latest_checkpoint(state_dir: str, name: str) -> str | None:
    """The ``_metadata`` of the local job's latest retained checkpoint."""
    from cjob_checkpoint.store import StoreError

    directory = _job_dir(state_dir, name)
    if directory is None:
        return None
    try:
        checkpoints = _retained(directory)
    except StoreError:
        return None
    return max(checkpoints, key=lambda c: c.checkpoint_id).metadata_path if checkpoints else None


def _check_state(job: CheckpointedJob, *, job_file: Path, checkpoint: str) -> int:
    """The runtime's own check, as a process (the CLI never imports the runtime): it
    loads the job's code and compares its pipeline with the checkpoint. Its exit code
    is the one a restore would end with (10: ``IncompatibleState``)."""
    code = job.spec.job
    remote = [entry for entry in code.python_path if is_s3_code(entry)]
    if remote:
        return _fail(f"--against loads the job's code locally; its pythonPath names "
                     f"{remote[0]}, an S3 archive")
    base = job_file.resolve().parent
    paths = [entry if os.path.isabs(entry) else str((base / entry).resolve())
             for entry in code.python_path]
    if "://" not in checkpoint:
        checkpoint = Path(checkpoint).resolve().as_uri()
    command = [sys.executable, "-m", "job_runtime", "check-state",
               "--entrypoint", code.entrypoint, "--args-json", json.dumps(code.args),
               "--checkpoint", checkpoint, *[arg for p in paths for arg in ("--python-path", p)]]
    return subprocess.run(command, check=False).returncode


def cmd_state_show(ns: argparse.Namespace) -> int:
    """The runtime's ``state`` command, as a process (the CLI never imports the runtime),
    on the checkpoint named by a path, or by a local job and one of its ids."""
    checkpoint = ns.checkpoint
    if ns.name is None and checkpoint is not None and checkpoint.isdigit():
        return _fail(f"checkpoint {checkpoint}: an id needs the job's name "
                     f"(cjob state show NAME --checkpoint {checkpoint})")
    if ns.name is not None and (checkpoint is None or checkpoint.isdigit()):
        directory = _job_dir(ns.state_dir, ns.name)
        if directory is None:
            return _fail(f"no job {ns.name!r} in {ns.state_dir} (run it with cjob run first)", 1)
        from cjob_checkpoint.store import StoreError

        try:
            retained = sorted(_retained(directory), key=lambda c: c.checkpoint_id)
        except StoreError as exc:
            return _fail(f"cannot read the checkpoints of {ns.name!r}: {exc}", 1)
        if not retained:
            return _fail(f"job {ns.name!r} has no retained checkpoint in {ns.state_dir}", 1)
        chosen = retained[-1] if checkpoint is None else next(
            (c for c in retained if c.checkpoint_id == int(checkpoint)), None)
        if chosen is None:
            ids = ", ".join(str(c.checkpoint_id) for c in retained)
            return _fail(f"job {ns.name!r} retains no checkpoint {checkpoint} (it retains "
                         f"{ids})", 1)
        checkpoint = chosen.metadata_path
    if checkpoint is None:
        return _fail("name a local job or a checkpoint (--checkpoint PATH)")
    if "://" not in checkpoint:
        checkpoint = Path(checkpoint).resolve().as_uri()
    command = [sys.executable, "-m", "job_runtime", "state", "--checkpoint", checkpoint,
               "--output", ns.output, "--limit", str(ns.limit),
               *(["--operator", ns.operator] if ns.operator else []),
               *(["--state", ns.state] if ns.state else []),
               *[arg for path in ns.python_path
                 for arg in ("--python-path", str(Path(path).resolve()))]]
    return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    if ns.command == "run":
        return cmd_run(ns)
    if ns.command == "status":
        return cmd_status(ns)
    if ns.command == "checkpoints":
        return cmd_checkpoints_list(ns)
    if ns.command == "snapshot":
        return cmd_snapshot(ns)
    if ns.command == "state":
        return cmd_state_show(ns)
    return cmd_validate(ns)


if __name__ == "__main__":
    sys.exit(main())
