"""A client of the table server: our Delta and Iceberg tables as Spark reads them.

:class:`LakeReader` starts :mod:`e2e.lakereader.table_server` under the reader's own
Python (:mod:`e2e.lakereader.reader_env`) once and asks it for one table at a time;
the rows come back as dictionaries, as Spark's JSON of them (numbers, strings,
``None``). What fails is raised as :class:`LakeReadError` with the end of the
server's log, which holds Spark's own words.
"""

from __future__ import annotations

import enum
import json
import os
import selectors
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from e2e.lakereader.reader_env import ReaderEnv

PROTOCOL_VERSION = 1
START_TIMEOUT = 300.0
"""Seconds for the server's Spark session to start (a JVM and the connectors' classes,
slower on a loaded machine)."""
READ_TIMEOUT = 180.0
SQLITE_URI = "sqlite:///"


class TableFormat(enum.Enum):
    DELTA = "delta"
    ICEBERG = "iceberg"


class LakeReadError(RuntimeError):
    """The server could not start or read a table; the message ends with its log."""

    def __init__(self, *, problem: str, log_tail: str) -> None:
        self.problem = problem
        self.log_tail = log_tail
        super().__init__(f"{problem}\n--- the table reader's log ---\n{log_tail}")


class LakeReader:
    """One table server, started by :meth:`start`, stopped by :meth:`close`."""

    def __init__(self, *, env: ReaderEnv, work_dir: Path) -> None:
        self.env = env
        self.work_dir = work_dir
        self.log_path = work_dir / "table-reader.log"
        self._proc: subprocess.Popen[str] | None = None
        self._answers: IO[str] | None = None
        self._selector = selectors.DefaultSelector()
        self._pending = ""

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        read_end, write_end = os.pipe()
        server = Path(__file__).resolve().parent / "table_server.py"
        with self.log_path.open("w") as log:
            self._proc = subprocess.Popen(
                [str(self.env.python), str(server), "--jars", str(self.env.jars),
                 "--answers", str(write_end)],
                stdin=subprocess.PIPE, stdout=log, stderr=log, text=True,
                pass_fds=(write_end,), cwd=self.work_dir, env=_clean_env(),
                start_new_session=True)
        os.close(write_end)
        self._answers = os.fdopen(read_end, "r")
        os.set_blocking(read_end, False)
        self._selector.register(self._answers, selectors.EVENT_READ)
        self._answer(timeout=START_TIMEOUT, what="start Spark")

    def delta_rows(self, location: Path) -> list[dict[str, Any]]:
        """The rows of the Delta table at ``location`` (a local path)."""
        return self._read({"format": TableFormat.DELTA.value, "location": str(location)},
                          what=f"read the Delta table at {location}")

    def iceberg_rows(self, table: str, *, catalog: Mapping[str, str],
                     catalog_name: str = "default") -> list[dict[str, Any]]:
        """The rows of Iceberg table ``table`` (``namespace.name``) of a pyiceberg SQL
        catalog on SQLite (``catalog``: its properties, as the sink was given them),
        loaded through Iceberg's JDBC catalog on the same file."""
        uri = catalog.get("uri", "")
        if not uri.startswith(SQLITE_URI):
            raise ValueError(f"only an SQLite catalog is read here, got uri {uri!r}")
        request = {"format": TableFormat.ICEBERG.value, "table": table,
                   "catalog": {"name": catalog_name, "warehouse": catalog["warehouse"],
                               "uri": "jdbc:sqlite:/" + uri.removeprefix(SQLITE_URI)}}
        return self._read(request, what=f"read the Iceberg table {table}")

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        if proc.stdin is not None:
            try:
                proc.stdin.close()  # the server ends when its requests do
            except OSError:
                pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._answers is not None:
            self._selector.unregister(self._answers)
            self._answers.close()
            self._answers = None

    def _read(self, request: dict[str, Any], *, what: str) -> list[dict[str, Any]]:
        if self._proc is None or self._proc.stdin is None:
            raise LakeReadError(problem=f"cannot {what}: the reader is not running",
                                log_tail=self._log_tail())
        self._proc.stdin.write(json.dumps({"version": PROTOCOL_VERSION, **request}) + "\n")
        self._proc.stdin.flush()
        answer = self._answer(timeout=READ_TIMEOUT, what=what)
        if "error" in answer:
            raise LakeReadError(problem=f"Spark could not {what}: {answer['error']}",
                                log_tail=self._log_tail())
        rows: list[dict[str, Any]] = answer["rows"]
        return rows

    def _answer(self, *, timeout: float, what: str) -> dict[str, Any]:
        assert self._proc is not None and self._answers is not None
        deadline = time.monotonic() + timeout
        while "\n" not in self._pending:
            if self._proc.poll() is not None:
                raise LakeReadError(problem=f"the reader exited ({self._proc.returncode}) "
                                            f"before it could {what}",
                                    log_tail=self._log_tail())
            left = deadline - time.monotonic()
            if left <= 0:
                raise LakeReadError(problem=f"the reader did not {what} in {timeout:.0f} s",
                                    log_tail=self._log_tail())
            if self._selector.select(timeout=min(left, 1.0)):
                self._pending += self._answers.read() or ""
        line, self._pending = self._pending.split("\n", 1)
        answer: dict[str, Any] = json.loads(line)
        if answer.get("version") != PROTOCOL_VERSION:
            raise LakeReadError(problem=f"the reader answered in version "
                                        f"{answer.get('version')!r}", log_tail="")
        return answer

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return "(no log)"


def _clean_env() -> dict[str, str]:
    """The reader's environment: none of the project's Spark or Python settings (its
    PySpark is another version, with jars of its own)."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "JAVA_HOME", "TMPDIR")
    return {name: os.environ[name] for name in keep if name in os.environ}
