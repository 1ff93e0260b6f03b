"""Database names the harness creates: lower-case letters, digits and ``_`` only.

Such a name needs no quoting anywhere: not in SQL, not in a connection URI, not in a
shell. PostgreSQL cuts identifiers at 63 bytes without an error, so two long names that
differ only at the end would silently be one database; names are checked, not cut.
"""

from __future__ import annotations

import re
import secrets

MAX_LENGTH = 63
_NAME = re.compile(rf"[a-z_][a-z0-9_]{{0,{MAX_LENGTH - 1}}}")
_OTHER = re.compile(r"[^a-z0-9]+")
_SUFFIX_BYTES = 4


def check_database_name(name: str) -> str:
    """``name`` itself when it is a safe database name, else :class:`ValueError`."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"database name {name!r}: use 1 to {MAX_LENGTH} lower-case letters, digits and "
            "underscores, not starting with a digit"
        )
    return name


def database_name_for(test_name: str) -> str:
    """A new database's name for the test ``test_name``: ``t_<its name>_<8 hex digits>``.

    Characters other than letters and digits become ``_`` and the name is cut to fit;
    the random suffix keeps apart tests whose cut names are equal (parametrized tests
    with long ids) and a test run twice against one server.
    """
    suffix = secrets.token_hex(_SUFFIX_BYTES)
    slug = _OTHER.sub("_", test_name.lower()).strip("_")
    stem = f"t_{slug}"[: MAX_LENGTH - len(suffix) - 1].rstrip("_")
    return check_database_name(f"{stem}_{suffix}")
