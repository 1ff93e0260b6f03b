"""A runc front for the private Docker engine: drops CAP_SYS_RESOURCE, then runs runc.

Docker 20.10 (Debian bookworm's ``docker.io``) gives a ``--privileged`` container
every capability the kernel knows. Where the engine's own root lacks one, as root in
some virtual machines lacks CAP_SYS_RESOURCE, runc cannot grant it and fails with
"unable to apply caps: operation not permitted" (Docker 23 and later ask only for the
capabilities their root holds). kind runs its nodes ``--privileged`` and ``docker
exec --privileged``s into them, so the engine that ``e2e/kind/engine.py`` starts
registers this program as its default runtime: for ``create`` and ``run`` it removes
the capabilities its own process lacks from the bundle's ``config.json``, for
``exec`` from the ``--process`` file, and then replaces itself with runc, arguments
unchanged. Every other command goes to runc untouched.

Standard library only, run by the host's ``python3``: the engine calls it for every
container start and exec, outside the project's virtualenv.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: Where the real runc is, unless CJOB_RUNC names another.
DEFAULT_RUNC = "/usr/sbin/runc"

_CAPABILITY_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")
#: Capability numbers of the names runc may be asked for (linux/capability.h).
_CAPABILITY_BITS = {
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
    "CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
    "CAP_LINUX_IMMUTABLE": 9, "CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11,
    "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15,
    "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19,
    "CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21, "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23,
    "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25, "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27,
    "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29, "CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
    "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
    "CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37, "CAP_PERFMON": 38, "CAP_BPF": 39,
    "CAP_CHECKPOINT_RESTORE": 40,
}  # fmt: skip


def held_capabilities(*, status: str) -> set[str]:
    """The capability names in this process's bounding set (``/proc/self/status``)."""
    for line in status.splitlines():
        if line.startswith("CapBnd:"):
            mask = int(line.split(":", 1)[1].strip(), 16)
            return {name for name, bit in _CAPABILITY_BITS.items() if mask >> bit & 1}
    return set(_CAPABILITY_BITS)


def without_missing(process: dict[str, object], *, held: set[str]) -> bool:
    """Remove from an OCI process's capability sets every known capability that is not
    held; says whether anything was removed. Unknown names are left for runc."""
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return False
    changed = False
    for key in _CAPABILITY_SETS:
        names = caps.get(key)
        if not isinstance(names, list):
            continue
        kept = [n for n in names if n not in _CAPABILITY_BITS or n in held]
        if len(kept) != len(names):
            caps[key] = kept
            changed = True
    return changed


def _rewrite(path: Path, *, held: set[str], nested: bool) -> None:
    document = json.loads(path.read_text())
    process = document.get("process") if nested else document
    if isinstance(process, dict) and without_missing(process, held=held):
        temporary = path.with_name(path.name + ".cjob")
        temporary.write_text(json.dumps(document))
        os.replace(temporary, path)


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _command(args: list[str]) -> tuple[str | None, list[str]]:
    """runc's subcommand and the arguments after it (global options come first)."""
    takes_value = {"--root", "--log", "--log-format", "--criu", "--rootless"}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            return arg, args[i + 1 :]
        i += 2 if arg in takes_value else 1
    return None, []


def adjust(args: list[str], *, held: set[str]) -> None:
    """Rewrite the file the runc command ``args`` will read, if it asks for more
    capabilities than are ``held``."""
    command, rest = _command(args)
    if command in ("create", "run"):
        bundle = Path(_option(rest, "--bundle") or _option(rest, "-b") or ".")
        _rewrite(bundle / "config.json", held=held, nested=True)
    elif command == "exec":
        process = _option(rest, "--process") or _option(rest, "-p")
        if process:
            _rewrite(Path(process), held=held, nested=False)


def main() -> None:
    args = sys.argv[1:]
    adjust(args, held=held_capabilities(status=Path("/proc/self/status").read_text()))
    runc = os.environ.get("CJOB_RUNC", DEFAULT_RUNC)
    os.execv(runc, [runc, *args])


if __name__ == "__main__":
    main()
