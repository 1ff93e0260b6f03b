"""The envelope every small JSON record that crosses a process boundary shares.

A record carries a format ``version``. A reader accepts only the version it was
written for: a newer release's record is reported as unreadable, never half-read.
Each record family raises its own error class, so callers catch what they expect.
"""

from __future__ import annotations

from typing import Any


def versioned_body(data: object, *, what: str, version: int,
                   error: type[ValueError]) -> dict[str, Any]:
    """``data`` as a JSON object of format ``version``; raises ``error`` saying why not."""
    if not isinstance(data, dict):
        raise error(f"{what}: expected a JSON object")
    found = data.get("version")
    if found != version:
        raise error(f"{what}: format version {found!r} is not {version}, "
                    f"the one this release reads")
    return data
