"""The Spark that reads our Delta and Iceberg tables back: a virtualenv of its own.

The runtime runs on a Spark for which neither Delta Lake nor Iceberg publishes a
connector yet, and a user's Spark may well be an older one; either way "readable by
Spark" is asked of a Spark that has both connectors. So the tests read tables with
PySpark :data:`PYSPARK` in a virtualenv beside the project's, with the connectors'
jars of ``pom.xml`` (built for that Spark), both in
``${CJOB_CACHE_DIR:-~/.cache/checkpointed-jobs}/lake-reader/``. Each is made once:
the virtualenv carries a marker naming the PySpark it holds, written after pip
finished, and the jars are :mod:`e2e.maven_jars`'. ``make test`` makes both while
the unit tests run (``python -m e2e.lakereader install``).
"""

from __future__ import annotations

import dataclasses
import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

from e2e.maven_jars import cache_root, fetch_jars

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
PYSPARK = "4.1.1"
"""The reader's PySpark: the Spark release the connectors of ``pom.xml`` are built for."""
MARKER = ".installed"


class ReaderInstallError(RuntimeError):
    """The reader's virtualenv could not be made; carries the tail of pip's output."""

    def __init__(self, *, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


@dataclasses.dataclass(frozen=True)
class ReaderEnv:
    """Where the reader's Python and the connectors' jars are."""

    python: Path
    jars: Path


def reader_dir() -> Path:
    return cache_root() / "lake-reader"


def venv_dir() -> Path:
    return reader_dir() / f"pyspark-{PYSPARK}"


def is_installed() -> bool:
    try:
        return (venv_dir() / MARKER).read_text().strip() == PYSPARK
    except OSError:
        return False


def ensure_reader_env() -> ReaderEnv:
    """The reader's virtualenv and jars, made first where the cache lacks them."""
    jars = fetch_jars(pom=POM, target=reader_dir() / "jars", what="the Delta and Iceberg "
                      "connectors of the table reader", transitive=False)
    venv = venv_dir()
    if not is_installed():
        venv.parent.mkdir(parents=True, exist_ok=True)
        with (venv.parent / ".venv-lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not is_installed():
                _install(venv)
    return ReaderEnv(python=venv / "bin" / "python", jars=jars)


def _install(venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    log = venv.parent / f"pyspark-{PYSPARK}-install.log"
    with log.open("w") as out:
        made = subprocess.run([_base_python(), "-m", "venv", str(venv)], stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        installed = made.returncode == 0 and subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
             f"pyspark=={PYSPARK}"], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, check=False).returncode == 0
    if not installed:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        shutil.rmtree(venv, ignore_errors=True)
        raise ReaderInstallError(problem=f"could not install PySpark {PYSPARK} for the table "
                                         f"reader into {venv}:\n{tail}")
    (venv / MARKER).write_text(PYSPARK + "\n")


def _base_python() -> str:
    """The interpreter the project's virtualenv was made from: a virtualenv made from
    another one's Python would depend on it."""
    return str(Path(sys.base_prefix) / "bin" / "python3")
