"""One real PostgreSQL server on loopback: a throwaway cluster for tests and local runs.

The server is Debian's ``postgres`` from :mod:`e2e.postgres.install`, not a mock or an
in-memory stand-in: transactions, locks, isolation levels and constraint errors behave
as in production. ``initdb`` makes a fresh cluster in ``work_dir/data``; the server
listens on ``127.0.0.1`` only, on a port chosen free when the server is created, and
its unix socket lives in the data folder, so it never needs ``/var/run/postgresql``
and never meets the machine's own cluster.

Authentication is ``trust``, for TCP from ``127.0.0.1`` and the socket only (the
cluster's ``pg_hba.conf`` has nothing else): the data is throwaway and the address
loopback, like the Kafka broker's plaintext listener, and a connection string without
a password can be printed, logged and put in an env file. The superuser is
``postgres``, whoever starts the server.

Durability against a machine crash is traded for speed (``fsync`` and
``full_page_writes`` off): a cluster that lives for one test run never has to survive
a power cut, and two shared cores spend no time flushing it. ``synchronous_commit``
stays on: a commit returns once its WAL is in the kernel's hands, so a killed server
(a test of a crash) loses nothing it confirmed, as in production.

A killed server must leave nothing behind either: its dynamic shared memory is kept
in files in the data folder (``mmap``) rather than in ``/dev/shm``, where a kill would
leave it, and :meth:`PostgresServer.stop` removes the interlock segment a kill leaves.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TypedDict
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from e2e.local_service import HOST, free_port, tail_file
from e2e.postgres.install import INSTALL_ROOT, SERVER_USER, Account, find_bin_dir, server_account
from e2e.postgres.names import check_database_name
from e2e.postgres.processes import remove_leftover_shared_memory, stop_server

SUPERUSER = "postgres"
DEFAULT_DBNAME = "postgres"
DEFAULT_START_TIMEOUT = 60.0
DEFAULT_STOP_GRACE = 10.0
CONNECT_TIMEOUT_S = 2
SCRATCH_PREFIX = "cjob-postgres-"

PG_HBA = f"""\
# A throwaway test cluster: trusted on its unix socket and on 127.0.0.1, nowhere else.
local all all trust
host all all {HOST}/32 trust
"""

SETTINGS = {
    "listen_addresses": HOST,
    "fsync": "off",
    "full_page_writes": "off",
    "dynamic_shared_memory_type": "mmap",
}
"""Given on the server's command line, over what ``initdb`` wrote: ``ps`` shows them."""


class PostgresStartError(RuntimeError):
    """Raised when the cluster cannot be made or the server does not serve in time.

    ``log_tail`` holds the last lines of the log that says why (empty when no program ran).
    """

    def __init__(self, *, reason: str, log_path: Path | None) -> None:
        self.reason = reason
        self.log_path = log_path
        self.log_tail = tail_file(log_path) if log_path is not None else ""
        where = f" (log: {log_path}); its last lines:\n{self.log_tail}" if log_path else ""
        super().__init__(f"PostgreSQL server {reason}{where}")


class PostgresServer:
    """A throwaway PostgreSQL cluster and its server process, with all its files in ``work_dir``.

    ``work_dir`` holds the cluster (``data/``), the server's log (``postgres.log``) and
    ``initdb``'s (``initdb.log``). Under root the folder is given to the ``postgres``
    user, and every folder above it must let that user in (see :func:`scratch_dir`).

    ``die_with_parent`` asks the kernel for a fast shutdown of the server when the
    process that started it dies, so a test run killed mid-way leaves no server behind;
    a server meant to outlive its starter (``python -m e2e.postgres up``) leaves it off.
    """

    def __init__(
        self,
        *,
        work_dir: Path,
        install_root: Path = INSTALL_ROOT,
        port: int | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.work_dir = work_dir.resolve()
        self.install_root = install_root
        self.die_with_parent = die_with_parent
        self._port = port if port is not None else free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self._port

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "postgres.log"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, which also names the server's process group."""
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def dsn(self, *, dbname: str = DEFAULT_DBNAME) -> str:
        """A libpq connection string for ``dbname``: ``postgresql://postgres@127.0.0.1:<port>/<db>``.

        The URI form, which libpq, psycopg and ``psql`` all take, rather than
        ``host=... port=...``: it has no spaces, so ``POSTGRES_DSN=<it>`` is one shell word.
        """
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{quote(dbname, safe='')}"

    def start(self, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Make the cluster (the first time), start the server and wait until it serves.

        Raises :class:`~e2e.postgres.install.MissingPostgresError` without the Debian
        package, and :class:`PostgresStartError` with the log's tail when ``initdb``
        fails or the server exits or does not accept a connection within ``timeout``
        seconds (the server is stopped then).
        """
        if self.is_running():
            return
        bin_dir = find_bin_dir(install_root=self.install_root)
        account = server_account()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if account is not None:
            os.chown(self.work_dir, account.uid, account.gid)
            blocked = unreachable_folder(self.work_dir, account=account)
            if blocked is not None:
                raise PostgresStartError(
                    reason=f"cannot use {self.work_dir}: the `{SERVER_USER}` user it runs as "
                    f"may not enter {blocked}; choose a folder it can reach (as "
                    "scratch_dir() makes)",
                    log_path=None,
                )
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bin_dir=bin_dir, account=account)
        argv = [str(bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                "-k", str(self.data_dir)]  # fmt: skip
        for name, value in SETTINGS.items():
            argv += ["-c", f"{name}={value}"]
        if self.die_with_parent and shutil.which("setpriv"):
            # setpriv (util-linux) sets the parent-death signal and execs postgres; SIGINT
            # is the fast shutdown. It runs after the switch to the server's user, which
            # would clear the setting if it came before.
            argv = ["setpriv", "--pdeathsig", "INT", "--", *argv]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=self.work_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_as_account(account),
            )
        try:
            self._wait_until_serving(timeout=timeout)
        except BaseException:
            self.stop(grace=5.0)
            raise

    def stop(self, *, grace: float = DEFAULT_STOP_GRACE) -> None:
        """Fast shutdown, then SIGKILL to every process of the server after ``grace`` seconds.

        Every process means the postmaster's process group and each of its children's
        (see :mod:`e2e.postgres.processes`). Returns when none of them is left and the
        port is free; after a kill, the shared memory segment it leaves is removed too.
        ``grace=0`` kills at once: the server crashing.
        """
        proc = self.process
        if proc is None:
            return
        stop_server(proc.pid, grace=grace, is_alive=lambda: proc.poll() is None)
        proc.wait()
        self.process = None
        remove_leftover_shared_memory(self.data_dir)

    def create_database(self, name: str) -> str:
        """Create the empty database ``name`` (see :mod:`e2e.postgres.names`); its dsn."""
        check_database_name(name)
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn(dbname=name)

    def drop_database(self, name: str) -> None:
        """Drop the database ``name`` if it exists, closing whatever connections it still has."""
        check_database_name(name)
        with self._connect() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def _connect(self) -> psycopg.Connection[TupleRow]:
        return psycopg.connect(self.dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def _initdb(self, *, bin_dir: Path, account: Account | None) -> None:
        argv = [
            str(bin_dir / "initdb"), "-D", str(self.data_dir), "--username", SUPERUSER,
            "--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-sync",
            "--no-instructions",
        ]  # fmt: skip
        initdb_log = self.work_dir / "initdb.log"
        with initdb_log.open("wb") as log:
            code = subprocess.run(
                argv, cwd=self.work_dir, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, check=False, **_as_account(account),
            ).returncode  # fmt: skip
        if code != 0:
            raise PostgresStartError(
                reason=f"cluster could not be made: initdb exited with code {code}",
                log_path=initdb_log,
            )
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text(PG_HBA)
        if account is not None:
            os.chown(hba, account.uid, account.gid)

    def _wait_until_serving(self, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            try:
                with self._connect() as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise PostgresStartError(
                    reason=f"did not accept connections on {HOST}:{self.port} "
                    f"within {timeout:.0f}s",
                    log_path=self.log_path,
                )
            time.sleep(0.1)

    def _check_alive(self) -> None:
        proc = self.process
        if proc is not None and proc.poll() is not None:
            raise PostgresStartError(
                reason=f"exited with code {proc.returncode}", log_path=self.log_path
            )


def scratch_dir() -> Path:
    """A new folder for a server in the system's temporary folder, that anyone may enter.

    pytest's temporary folders sit below one only their owner may enter: under root the
    ``postgres`` user could not reach a cluster there. Entering this one reveals nothing
    that the cluster, trusting every loopback connection, does not already allow.
    """
    folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    folder.chmod(0o755)
    return folder


def unreachable_folder(path: Path, *, account: Account) -> Path | None:
    """The first folder from ``/`` down to ``path`` that ``account`` may not enter, or None."""
    for folder in (*reversed(path.parents), path):
        info = folder.stat()
        if info.st_uid == account.uid:
            bit = stat.S_IXUSR
        elif info.st_gid in account.groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return folder
    return None


class _Credentials(TypedDict, total=False):
    user: int
    group: int
    extra_groups: list[int]


def _as_account(account: Account | None) -> _Credentials:
    """``subprocess`` arguments that run a program as ``account``; none when not root.

    ``subprocess`` switches the user between fork and exec in C, which is safe in a
    threaded process, unlike a ``preexec_fn``.
    """
    if account is None:
        return {}
    return _Credentials(user=account.uid, group=account.gid, extra_groups=list(account.groups))
