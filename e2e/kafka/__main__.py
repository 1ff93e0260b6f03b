"""A Kafka broker on this machine for manual use and scripts.

    python -m e2e.kafka up       start a broker in the background (it outlives the command);
                                 the last line printed is KAFKA_BOOTSTRAP=127.0.0.1:<port>
    python -m e2e.kafka status   say whether it runs
    python -m e2e.kafka down     stop it
    python -m e2e.kafka jars     only fetch the broker's jars (builds do it ahead of the tests)

``up`` writes that line to ``.cjob/kafka/env`` too (``set -a; . .cjob/kafka/env; set +a``)
and the broker's pid to ``.cjob/kafka/kafka.pid``; the broker's data and log are in
``.cjob/kafka/broker/``. Each ``up`` starts an empty broker; ``up`` while one runs only
prints its line again. The first ``up`` fetches the Kafka jars with Maven.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from e2e.kafka.broker import (
    DEFAULT_HEAP_MB,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_GRACE,
    BrokerStartError,
    KafkaBroker,
    stop_process_group,
)
from e2e.kafka.jars import (
    FetchFailedError,
    MissingToolError,
    ensure_jars,
    is_complete,
    jar_dir,
    kafka_version,
    require_java,
)
from e2e.local_service import pid_alive, say, shown, write_whole
from e2e.repo import REPO_ROOT

DEFAULT_STATE_DIR = REPO_ROOT / ".cjob" / "kafka"
ENV_FILE = "env"
PID_FILE = "kafka.pid"
WORK_DIR = "broker"


def up(*, state_dir: Path, timeout: float, heap_mb: int) -> int:
    """Start a detached broker unless one runs; print ``KAFKA_BOOTSTRAP=...`` last."""
    pid = running_pid(state_dir=state_dir)
    if pid is not None:
        say(f"a Kafka broker already runs (pid {pid}); stop it with: python -m e2e.kafka down")
        print((state_dir / ENV_FILE).read_text().strip())
        return 0
    try:
        require_java()
        if not is_complete(jar_dir()):
            say(f"fetching the Kafka {kafka_version()} jars with Maven (only this once)")
        jars = ensure_jars()
    except MissingToolError as exc:
        return _fail(str(exc))
    except FetchFailedError as exc:
        print(exc.output_tail, file=sys.stderr)
        return _fail(f"Maven could not fetch the Kafka jars (exit code {exc.returncode})")
    for name in (ENV_FILE, PID_FILE):
        (state_dir / name).unlink(missing_ok=True)
    work_dir = state_dir / WORK_DIR
    shutil.rmtree(work_dir, ignore_errors=True)
    broker = KafkaBroker(work_dir=work_dir, jar_dir=jars, heap_mb=heap_mb)
    try:
        broker.start(timeout=timeout)
    except BrokerStartError as exc:
        print(exc.log_tail, file=sys.stderr)
        return _fail(f"the Kafka broker {exc.reason} (log: {shown(exc.log_path)})")
    line = f"KAFKA_BOOTSTRAP={broker.bootstrap}"
    write_whole(state_dir / PID_FILE, f"{broker.pid}\n")
    write_whole(state_dir / ENV_FILE, f"{line}\n")
    say(f"Kafka broker up (pid {broker.pid}, log {shown(broker.log_path)}); the line below "
         f"is also in {shown(state_dir / ENV_FILE)}; stop it with: python -m e2e.kafka down")  # fmt: skip
    print(line, flush=True)
    return 0


def down(*, state_dir: Path, grace: float) -> int:
    """Stop the broker ``up`` started: SIGTERM, SIGKILL after ``grace`` seconds."""
    pid = running_pid(state_dir=state_dir)
    if pid is None:
        say("no Kafka broker running")
    else:
        stop_process_group(pid, grace=grace)
        say(f"Kafka broker stopped (pid {pid})")
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


def jars() -> int:
    """Fetch the broker's jars into the cache unless they are there already."""
    try:
        if not is_complete(jar_dir()):
            say(f"fetching the Kafka {kafka_version()} jars with Maven")
        print(ensure_jars())
    except (MissingToolError, FetchFailedError) as exc:
        return _fail(str(exc))
    return 0


def running_pid(*, state_dir: Path) -> int | None:
    """The pid in the pid file when that process is this state folder's broker, else None.

    The command line is checked too, so a pid reused by another process after a reboot
    or a kill is not taken for the broker.
    """
    try:
        pid = int((state_dir / PID_FILE).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    config = str(state_dir / WORK_DIR / "server.properties").encode()
    if b"kafka.Kafka" in cmdline and config in cmdline and pid_alive(pid):
        return pid
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kafka", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("command", choices=("up", "down", "status", "jars"))
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="where the env file, pid file, data and log go (default: %(default)s)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=DEFAULT_START_TIMEOUT,
                        help="seconds `up` waits for the broker to serve (default: %(default)s)")  # fmt: skip
    parser.add_argument("--heap-mb", type=int, default=DEFAULT_HEAP_MB,
                        help="the broker's Java heap in MiB (default: %(default)s)")  # fmt: skip
    ns = parser.parse_args(argv)
    state_dir: Path = ns.state_dir.resolve()
    try:
        if ns.command == "up":
            state_dir.mkdir(parents=True, exist_ok=True)
            return up(state_dir=state_dir, timeout=ns.timeout, heap_mb=ns.heap_mb)
        if ns.command == "down":
            return down(state_dir=state_dir, grace=DEFAULT_STOP_GRACE)
        if ns.command == "jars":
            return jars()
        return status(state_dir=state_dir)
    except KeyboardInterrupt:
        return _fail("interrupted")
    except OSError as exc:
        return _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))





def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
