"""A PostgreSQL server on this machine for manual use and scripts.

    python -m e2e.postgres up       start a server in the background (it outlives the command);
                                    the last line printed is
                                    POSTGRES_DSN=postgresql://postgres@127.0.0.1:<port>/postgres
    python -m e2e.postgres status   say whether it runs
    python -m e2e.postgres down     stop it

``up`` writes that line to ``.cjob/postgres/env`` too (``set -a; . .cjob/postgres/env;
set +a``) and the server's pid to ``.cjob/postgres/postgres.pid``; the cluster and its
log are in ``.cjob/postgres/server/``. Each ``up`` starts an empty cluster; ``up`` while
one runs only prints its line again. Without the Debian package ``postgresql`` it says
so in one line and exits with 2.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from e2e.local_service import say, shown, write_whole
from e2e.postgres.install import INSTALL_ROOT, MissingPostgresError
from e2e.postgres.processes import pid_alive, remove_leftover_shared_memory, stop_server
from e2e.postgres.server import (
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_GRACE,
    PostgresServer,
    PostgresStartError,
)
from e2e.repo import REPO_ROOT

DEFAULT_STATE_DIR = REPO_ROOT / ".cjob" / "postgres"
ENV_FILE = "env"
PID_FILE = "postgres.pid"
WORK_DIR = "server"
EXIT_FAILED = 1
EXIT_MISSING_PACKAGE = 2


def up(*, state_dir: Path, timeout: float, install_root: Path) -> int:
    """Start a detached server unless one runs; print ``POSTGRES_DSN=...`` last."""
    pid = running_pid(state_dir=state_dir)
    if pid is not None:
        say(f"a PostgreSQL server already runs (pid {pid}); stop it with: "
             "python -m e2e.postgres down")  # fmt: skip
        print((state_dir / ENV_FILE).read_text().strip())
        return 0
    for name in (ENV_FILE, PID_FILE):
        (state_dir / name).unlink(missing_ok=True)
    work_dir = state_dir / WORK_DIR
    shutil.rmtree(work_dir, ignore_errors=True)
    server = PostgresServer(work_dir=work_dir, install_root=install_root)
    try:
        server.start(timeout=timeout)
    except MissingPostgresError as exc:
        return _fail(str(exc), code=EXIT_MISSING_PACKAGE)
    except PostgresStartError as exc:
        if exc.log_path is None:
            return _fail(f"the PostgreSQL server {exc.reason}")
        print(exc.log_tail, file=sys.stderr)
        return _fail(f"the PostgreSQL server {exc.reason} (log: {shown(exc.log_path)})")
    line = f"POSTGRES_DSN={server.dsn()}"
    write_whole(state_dir / PID_FILE, f"{server.pid}\n")
    write_whole(state_dir / ENV_FILE, f"{line}\n")
    say(f"PostgreSQL server up (pid {server.pid}, log {shown(server.log_path)}); the line "
         f"below is also in {shown(state_dir / ENV_FILE)}; stop it with: "
         "python -m e2e.postgres down")  # fmt: skip
    print(line, flush=True)
    return 0


def down(*, state_dir: Path, grace: float) -> int:
    """Stop the server ``up`` started: fast shutdown, SIGKILL to all of it after ``grace`` s."""
    pid = running_pid(state_dir=state_dir)
    if pid is None:
        say("no PostgreSQL server running")
    else:
        stop_server(pid, grace=grace)
        remove_leftover_shared_memory(state_dir / WORK_DIR / "data")
        say(f"PostgreSQL server stopped (pid {pid})")
    for name in (ENV_FILE, PID_FILE):
        (state_dir / name).unlink(missing_ok=True)
    return 0


def status(*, state_dir: Path) -> int:
    pid = running_pid(state_dir=state_dir)
    if pid is None:
        print("stopped")
        return 1
    print(f"running (pid {pid}): {(state_dir / ENV_FILE).read_text().strip()}")
    return 0


def running_pid(*, state_dir: Path) -> int | None:
    """The pid in the pid file when that process is this state folder's server, else None.

    The command line is checked too (a postmaster keeps its own; its children rename
    themselves), so a pid reused by another process after a reboot or a kill is not
    taken for the server.
    """
    try:
        pid = int((state_dir / PID_FILE).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    data_dir = str(state_dir / WORK_DIR / "data").encode()
    if cmdline[0].endswith(b"/postgres") and data_dir in cmdline and pid_alive(pid):
        return pid
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.postgres", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="where the env file, pid file, cluster and log go (default: %(default)s)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT,
                        help="seconds `up` waits for the server to serve (default: %(default)s)")  # fmt: skip
    parser.add_argument("--install-root", type=Path, default=INSTALL_ROOT,
                        help="where the postgresql-<version> packages put their programs; the "
                             "newest version is used (default: %(default)s)")  # fmt: skip
    ns = parser.parse_args(argv)
    state_dir: Path = ns.state_dir.resolve()
    try:
        if ns.command == "up":
            state_dir.mkdir(parents=True, exist_ok=True)
            return up(state_dir=state_dir, timeout=ns.timeout, install_root=ns.install_root)
        if ns.command == "down":
            return down(state_dir=state_dir, grace=DEFAULT_STOP_GRACE)
        return status(state_dir=state_dir)
    except KeyboardInterrupt:
        return _fail("interrupted")
    except OSError as exc:
        return _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))





def _fail(message: str, *, code: int = EXIT_FAILED) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
