"""The PostgreSQL harness as tests and users meet it: the server serves through psycopg,
databases are separate, a stop leaves nothing behind, ``python -m e2e.postgres`` runs
one in the background, and a machine without the package gets one line saying what to
install.

Tests that start a server of their own put it in a scratch folder and stop it in a
``finally``, so that a failed assertion leaves no server running.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from paths import REPO

from e2e.local_service import port_open
from e2e.postgres import (
    MissingPostgresError,
    PostgresServer,
    PostgresStartError,
    check_database_name,
    database_name_for,
    find_bin_dir,
    scratch_dir,
)
from e2e.postgres.processes import pid_alive, server_processes


@pytest.fixture
def work_dir() -> Iterator[Path]:
    folder = scratch_dir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _query(dsn: str, query: str) -> list[tuple[object, ...]]:
    """The rows of the last statement of ``query`` ([] when it returns none)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(query)
        return cursor.fetchall() if cursor.description is not None else []


def _cli(
    command: str, *, state_dir: Path, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "e2e.postgres", command, "--state-dir", str(state_dir), *extra],
        cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def test_the_server_starts_and_answers_a_query_through_psycopg(
    postgres_server: PostgresServer,
) -> None:
    rows = _query(postgres_server.dsn(), "SELECT current_database(), current_user, 6 * 7")

    assert rows == [("postgres", "postgres", 42)]
    assert postgres_server.host == "127.0.0.1"
    port = postgres_server.port
    assert postgres_server.dsn() == f"postgresql://postgres@127.0.0.1:{port}/postgres"


def test_the_server_listens_on_loopback_with_its_socket_in_the_data_folder(
    postgres_server: PostgresServer,
) -> None:
    rows = _query(
        postgres_server.dsn(),
        "SELECT current_setting('listen_addresses'), current_setting('unix_socket_directories')",
    )

    assert rows == [("127.0.0.1", str(postgres_server.data_dir))]
    # Dynamic shared memory in the data folder: a kill leaves nothing in /dev/shm.
    assert _query(postgres_server.dsn(), "SHOW dynamic_shared_memory_type") == [("mmap",)]
    assert (postgres_server.data_dir / f".s.PGSQL.{postgres_server.port}").is_socket()


def test_two_databases_from_create_database_are_separate(
    postgres_server: PostgresServer,
) -> None:
    first = postgres_server.create_database(database_name_for("first"))
    second = postgres_server.create_database(database_name_for("second"))
    try:
        _query(first, "CREATE TABLE seen (n int); INSERT INTO seen VALUES (1)")

        assert _query(first, "SELECT n FROM seen") == [(1,)]
        assert _query(second, "SELECT to_regclass('seen')") == [(None,)]
        assert first != second
    finally:
        for dsn in (first, second):
            postgres_server.drop_database(dsn.rsplit("/", 1)[1])


def test_postgres_dsn_is_a_fresh_empty_database_named_after_the_test(postgres_dsn: str) -> None:
    [(name, tables)] = _query(
        postgres_dsn,
        "SELECT current_database(), count(*) FROM pg_tables WHERE schemaname = 'public'",
    )

    assert isinstance(name, str)
    assert re.fullmatch(r"t_test_postgres_dsn_is_a_fresh_empty_[a-z_]*_[0-9a-f]{8}", name), name
    assert len(name) <= 63
    assert tables == 0


def test_a_database_of_a_finished_test_is_dropped(postgres_server: PostgresServer) -> None:
    name = database_name_for("dropped")
    dsn = postgres_server.create_database(name)
    conn = psycopg.connect(dsn)  # left open, as a careless test would
    try:
        postgres_server.drop_database(name)

        rows = _query(postgres_server.dsn(), f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
        assert rows == []
    finally:
        conn.close()


def test_stop_leaves_no_process_of_the_server_running_and_frees_the_port(work_dir: Path) -> None:
    server = PostgresServer(work_dir=work_dir)
    try:
        server.start()
        pid = server.pid
        assert pid is not None
        # A client connection gives the server a backend process too, and stays open.
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("SELECT 1")
            processes = server_processes(pid)
            assert processes[0] == pid
            assert len(processes) > 3, "the postmaster alone: the check would prove little"

            server.stop()

        assert [each for each in processes if pid_alive(each)] == []
        assert server_processes(pid) == []
        assert not server.is_running()
        assert not port_open(server.port)
        # A new server can listen on the port, as PostgreSQL does: with SO_REUSEADDR,
        # since the connections the stop closed may leave the port in TIME_WAIT.
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", server.port))
            sock.listen()
    finally:
        server.stop(grace=0)


def test_a_kill_stops_every_process_of_the_server_even_a_busy_backend(work_dir: Path) -> None:
    server = PostgresServer(work_dir=work_dir)
    errors: list[BaseException] = []

    def busy() -> None:
        # Pure computation: the backend never looks whether its postmaster still lives.
        try:
            _query(server.dsn(), "SELECT count(*) FROM generate_series(1, 10000000000)")
        except psycopg.OperationalError as exc:
            errors.append(exc)

    try:
        server.start()
        pid = server.pid
        assert pid is not None
        worker = threading.Thread(target=busy, daemon=True)
        worker.start()
        deadline = time.monotonic() + 10
        while not _active_queries(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _active_queries(server) == 1
        processes = server_processes(pid)
        shmid = (server.data_dir / "postmaster.pid").read_text().splitlines()[6].split()[1]
        assert _shared_memory_ids() >= {shmid}

        server.stop(grace=0)

        assert [each for each in processes if pid_alive(each)] == []
        assert not port_open(server.port)
        assert shmid not in _shared_memory_ids(), "the killed server's segment is left"
        worker.join(timeout=10)
        assert len(errors) == 1, "the busy query should have lost its server"
    finally:
        server.stop(grace=0)


def test_a_row_committed_before_a_kill_is_there_when_the_server_starts_again(
    work_dir: Path,
) -> None:
    server = PostgresServer(work_dir=work_dir)
    try:
        server.start()
        dsn = server.create_database("kept")
        _query(dsn, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")

        server.stop(grace=0)
        server.start()

        assert _query(dsn, "SELECT n FROM kept") == [(7,)]
    finally:
        server.stop(grace=0)


def _shared_memory_ids() -> set[str]:
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {row.split()[1] for row in rows}


def _active_queries(server: PostgresServer) -> int:
    [(count,)] = _query(
        server.dsn(),
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%generate_series%' "
        "AND state = 'active' AND pid <> pg_backend_pid()",
    )
    assert isinstance(count, int)
    return count


def test_a_server_that_cannot_start_says_why_with_its_logs_tail(work_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = PostgresServer(work_dir=work_dir, port=taken.getsockname()[1])
        try:
            with pytest.raises(PostgresStartError) as caught:
                server.start(timeout=30)
        finally:
            server.stop(grace=0)

    assert "exited with code" in caught.value.reason
    assert "could not" in caught.value.log_tail
    assert caught.value.log_path == server.log_path
    assert not server.is_running()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_a_folder_the_servers_user_cannot_enter_is_named_before_anything_runs(
    tmp_path: Path,
) -> None:
    # pytest's temporary folders sit below one that only root may enter.
    server = PostgresServer(work_dir=tmp_path / "postgres")

    with pytest.raises(PostgresStartError) as caught:
        server.start()

    assert "the `postgres` user it runs as may not enter" in caught.value.reason
    assert caught.value.log_path is None
    assert server.pid is None


def test_up_then_status_then_down_run_a_server_in_the_background() -> None:
    # The state folder must be one the server's user can enter when the test runs as root.
    scratch = scratch_dir()
    state_dir = scratch / "postgres"
    try:
        up = _cli("up", state_dir=state_dir)
        assert up.returncode == 0, up.stderr
        line = up.stdout.splitlines()[-1]
        assert re.fullmatch(r"POSTGRES_DSN=postgresql://postgres@127\.0\.0\.1:\d+/postgres", line)
        assert (state_dir / "env").read_text() == f"{line}\n"
        dsn = line.removeprefix("POSTGRES_DSN=")
        # The server outlived the command that started it, and serves.
        assert _query(dsn, "SELECT 1") == [(1,)]

        again = _cli("up", state_dir=state_dir)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[-1] == line
        assert "already runs" in again.stderr

        running = _cli("status", state_dir=state_dir)
        assert running.returncode == 0, running.stderr
        assert running.stdout.startswith("running (pid ")
        assert line in running.stdout
        pid = int((state_dir / "postgres.pid").read_text())
        processes = server_processes(pid)
        assert processes[0] == pid

        down = _cli("down", state_dir=state_dir)
        assert down.returncode == 0, down.stderr
        assert down.stderr.strip() == f"PostgreSQL server stopped (pid {pid})"
        assert [each for each in processes if pid_alive(each)] == []
        assert not port_open(int(dsn.rsplit(":", 1)[1].split("/")[0]))
        assert not (state_dir / "env").exists()

        stopped = _cli("status", state_dir=state_dir)
        assert stopped.returncode == 1
        assert stopped.stdout.strip() == "stopped"
        outputs = up.stderr + again.stderr + running.stderr + down.stderr + stopped.stderr
        assert "Traceback" not in outputs
    finally:
        _kill_leftover(state_dir)
        shutil.rmtree(scratch, ignore_errors=True)


def test_down_with_no_server_running_says_so_and_succeeds(tmp_path: Path) -> None:
    result = _cli("down", state_dir=tmp_path / "postgres")

    assert result.returncode == 0
    assert result.stderr.strip() == "no PostgreSQL server running"


def test_a_missing_binary_folder_is_one_line_naming_the_package_and_the_command(
    tmp_path: Path,
) -> None:
    with pytest.raises(MissingPostgresError) as caught:
        find_bin_dir(install_root=tmp_path / "nothing-here")

    message = str(caught.value)
    assert "\n" not in message
    assert "`postgresql`" in message
    assert "apt-get install -y --no-install-recommends postgresql" in message


def test_up_without_the_package_prints_that_line_and_exits_with_2(tmp_path: Path) -> None:
    empty = tmp_path / "lib-postgresql"
    (empty / "15" / "bin").mkdir(parents=True)  # a version folder without its programs

    result = _cli("up", state_dir=tmp_path / "postgres", extra=("--install-root", str(empty)))

    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: PostgreSQL server not found"), result.stderr
    assert "apt-get install -y --no-install-recommends postgresql" in result.stderr
    assert result.stdout == ""


def test_the_newest_installed_major_is_used(tmp_path: Path) -> None:
    for version in ("9.6", "15", "16", "not-a-version"):
        bin_dir = tmp_path / version / "bin"
        bin_dir.mkdir(parents=True)
        if version != "16":  # a folder left behind by a removed package
            for program in ("initdb", "postgres"):
                (bin_dir / program).write_text("#!/bin/sh\n")
                (bin_dir / program).chmod(0o755)

    assert find_bin_dir(install_root=tmp_path) == tmp_path / "15" / "bin"


@pytest.mark.parametrize(
    "test_name",
    ["test_x[Ünïcode-ids/and spaces]", "TEST_Upper", "1starts_with_digit", "x" * 200],
)
def test_a_test_name_becomes_a_safe_database_name(test_name: str) -> None:
    name = database_name_for(test_name)

    assert check_database_name(name) == name
    assert name != database_name_for(test_name)


@pytest.mark.parametrize("name", ["", "Upper", "9lives", "semi;colon", "x" * 64, "quote'd"])
def test_an_unsafe_database_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="database name"):
        check_database_name(name)


def _kill_leftover(state_dir: Path) -> None:
    """If a failed assertion left a server running, stop it the hard way."""
    if _cli("down", state_dir=state_dir).returncode == 0:
        return
    try:
        os.killpg(int((state_dir / "postgres.pid").read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass
