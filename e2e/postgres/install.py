"""Where Debian's PostgreSQL server is installed, and which OS user it runs as.

Debian's ``postgresql-<major>`` packages put ``initdb`` and ``postgres`` in
``/usr/lib/postgresql/<major>/bin``, off ``PATH``; several majors may sit side by side
after an upgrade, and the newest is taken, so nothing here names a version. Both
programs refuse to run as root: under root the server runs as the ``postgres`` user the
package creates, and without the package or that user the harness stops with one line
naming what to install.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
from pathlib import Path

INSTALL_ROOT = Path("/usr/lib/postgresql")
PACKAGE = "postgresql"
SERVER_USER = "postgres"
PROGRAMS = ("initdb", "postgres")


class MissingPostgresError(RuntimeError):
    """Raised when the server's programs or its OS user are missing; one line, with the fix."""

    def __init__(self, *, what: str) -> None:
        self.what = what
        super().__init__(
            f"{what}; install the Debian package `{PACKAGE}` "
            f"(as root: apt-get install -y --no-install-recommends {PACKAGE})"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Account:
    """The OS user the server's processes run as, when this process is root."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


def find_bin_dir(*, install_root: Path = INSTALL_ROOT) -> Path:
    """The ``bin`` folder of the newest major under ``install_root`` that has both programs."""
    majors: list[tuple[tuple[int, ...], Path]] = []
    try:
        entries = list(install_root.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        version = _version(entry.name)
        bin_dir = entry / "bin"
        if version is not None and all(_executable(bin_dir / name) for name in PROGRAMS):
            majors.append((version, bin_dir))
    if not majors:
        raise MissingPostgresError(
            what=f"PostgreSQL server not found (no {install_root}/<version>/bin/postgres)"
        )
    return max(majors)[1]


def server_account() -> Account | None:
    """The account to run ``initdb`` and ``postgres`` as: ``postgres`` under root, else None."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise MissingPostgresError(
            what=f"running as root, the server needs the OS user `{SERVER_USER}`, which "
            "does not exist"
        ) from None
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return Account(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups)


def _version(name: str) -> tuple[int, ...] | None:
    """``"15"`` -> ``(15,)``, ``"9.6"`` -> ``(9, 6)``; None for a folder that is no version."""
    parts = name.split(".")
    if not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
