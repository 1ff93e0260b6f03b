"""What a node changes on its host, recorded before it starts and put back after.

A kubelet, kube-proxy and the CNI plugins change the machine they run on: kernel
settings (the kubelet's "protect kernel defaults" sets ``vm.overcommit_memory``,
``vm.panic_on_oom``, ``kernel.panic``, ``kernel.panic_on_oops``,
``kernel.keys.root_maxkeys`` and ``kernel.keys.root_maxbytes``; kube-proxy sets
``route_localnet``), iptables rules and chains, a bridge, routes, network namespaces,
mounts under the kubelet's root, cgroups, and container processes whose shims outlive
containerd. A test run must leave the machine as it found it, so :class:`HostSnapshot`
records the settings and rules first and :func:`restore_host` puts them back, in
order, after the node stopped (a kind run's routes: ``e2e/kind/routes.py``). Every
stop runs its steps through :class:`Teardown`, so one step that fails or times out
never leaves the others undone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Kernel settings the node (kubelet, kube-proxy, the bridge) may change. The first six
#: are the kubelet's kernel tunables, which it sets at start on the shared kernel even
#: from inside a kind node container.
SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
)

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Folders a node creates outside its work dir whatever it is told: the shims'
#: socket folder and the kubelet's device-plugin socket folder.
FIXED_PATHS = (Path("/run/containerd"), Path("/var/lib/kubelet"))
NETNS_DIR = Path("/var/run/netns")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def read_sysctl(name: str) -> str | None:
    try:
        return _sysctl_path(name).read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        _sysctl_path(name).write_text(value)


def text_of(value: Any) -> str:
    """A string field of a record read from a file; ``TypeError`` for anything else."""
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _save(tool: str) -> str | None:
    try:
        proc = subprocess.run([tool], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@dataclass(frozen=True)
class HostSnapshot:
    """The host as it was before the node started."""

    sysctls: dict[str, str]
    iptables: str | None
    ip6tables: str | None
    netns: frozenset[str]
    links: frozenset[str]
    existing: frozenset[Path]

    @classmethod
    def capture(cls) -> HostSnapshot:
        values = {n: v for n in SYSCTLS if (v := read_sysctl(n)) is not None}
        return cls(
            sysctls=values,
            iptables=_save("iptables-save"),
            ip6tables=_save("ip6tables-save"),
            netns=frozenset(_netns_names()),
            links=frozenset(_link_names()),
            existing=frozenset(p for p in FIXED_PATHS if p.exists()),
        )

    def to_json(self) -> dict[str, Any]:
        """The snapshot as it is kept in the host lease (``lease.py``)."""
        return {
            "sysctls": dict(self.sysctls),
            "iptables": self.iptables,
            "ip6tables": self.ip6tables,
            "netns": sorted(self.netns),
            "links": sorted(self.links),
            "existing": sorted(str(p) for p in self.existing),
        }

    @classmethod
    def from_json(cls, data: Any) -> HostSnapshot:
        """Read :meth:`to_json`'s form back; ``TypeError`` or ``KeyError`` name what is
        wrong."""
        if not isinstance(data, dict):
            raise TypeError("snapshot is not an object")
        sysctls = data["sysctls"]
        if not isinstance(sysctls, dict):
            raise TypeError("sysctls is not an object")
        rules = {k: data[k] for k in ("iptables", "ip6tables")}
        for key, value in rules.items():
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{key} is not a string")
        return cls(
            sysctls={text_of(k): text_of(v) for k, v in sysctls.items()},
            iptables=rules["iptables"],
            ip6tables=rules["ip6tables"],
            netns=frozenset(text_of(n) for n in data["netns"]),
            links=frozenset(text_of(n) for n in data["links"]),
            existing=frozenset(Path(text_of(p)) for p in data["existing"]),
        )


Step = Callable[[], Iterable[str] | None]
"""One step of a stop: returns what it could not put back (or nothing)."""


class Teardown:
    """The steps of a stop, each run whatever the steps before it did.

    A stop that ends at its first failure leaves everything after it undone: a
    ``docker rm`` that times out would leave the engine running and the kernel
    settings changed until the next reboot. So every step runs in turn; what one
    returns or raises (a failed command, a timeout) becomes a problem, reported
    through ``log`` and by :meth:`finish`. An interrupt (Ctrl-C, the test timeout)
    is held until the remaining steps ran, then raised again by :meth:`finish`.
    """

    def __init__(self, *, log: Callable[[str], None] | None = None) -> None:
        self.problems: list[str] = []
        self._log = log
        self._interrupt: BaseException | None = None

    @property
    def interrupted(self) -> bool:
        """Whether a step was interrupted (what it should have done may be undone)."""
        return self._interrupt is not None

    def step(self, what: str, action: Step) -> None:
        try:
            found = list(action() or ())
        except Exception as exc:
            found = [f"{type(exc).__name__}: {exc}"]
        except BaseException as exc:  # finish the other steps first
            self._interrupt = self._interrupt or exc
            found = [f"interrupted ({type(exc).__name__})"]
        for problem in found:
            self.problems.append(f"{what}: {problem}")
            if self._log is not None:
                self._log(f"not put back: {what}: {problem}")

    def finish(self) -> list[str]:
        """What could not be put back; raises a held interrupt."""
        if self._interrupt is not None:
            raise self._interrupt
        return list(self.problems)


def _netns_names() -> list[str]:
    try:
        return [p.name for p in NETNS_DIR.iterdir()]
    except OSError:
        return []


def _link_names() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir()]


def cgroup_of(pid: int) -> str:
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") or controllers == "":
            return path
    return ""


def _exe_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _names(cmdline_pattern: re.Pattern[bytes], pid: int) -> bool:
    try:
        return cmdline_pattern.search(Path(f"/proc/{pid}/cmdline").read_bytes()) is not None
    except OSError:
        return False


def kill_node_processes(*, shim_binary: Path, work_dir: Path,
                        cgroup_parent: str = "/kubepods") -> int:
    """SIGKILL every process of this node, which all outlive a stopped or killed
    containerd and kubelet: the containers, found by their cgroup (the kubelet puts
    every pod under ``cgroup_parent``, a folder: ``/kubepods-other`` is not below
    ``/kubepods``); the runc shims, by their executable; and the node's own
    components (containerd, kubelet, kube-proxy), by their command line naming
    ``work_dir``.
    """
    shim = str(shim_binary.resolve())
    # The path whole: followed by a separator, the end of an argument, or nothing.
    naming = re.compile(re.escape(str(work_dir).encode()) + rb"(?=[/\x00]|$)")
    killed = 0
    for _ in range(3):
        found = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid == os.getpid():
                continue
            cgroup = cgroup_of(pid)
            in_pods = cgroup == cgroup_parent or cgroup.startswith(cgroup_parent + "/")
            if in_pods or _exe_of(pid) == shim or _names(naming, pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    found += 1
        killed += found
        if not found:
            break
        time.sleep(0.3)
    return killed


def unmount_below(root: Path) -> None:
    """Unmount everything mounted at or below ``root``, deepest first."""
    prefix = str(root.resolve())
    for _ in range(3):
        mounts = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target == prefix or target.startswith(prefix + "/"):
                mounts.append(target)
        if not mounts:
            return
        for target in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def remove_cgroups(*, name: str = "kubepods") -> None:
    """Remove the (now empty) cgroup trees the kubelet created, leaves first."""
    with contextlib.suppress(OSError):
        for hierarchy in CGROUP_ROOT.iterdir():
            top = hierarchy / name
            if not top.is_dir():
                continue
            for directory in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _tables(dump: str) -> set[str]:
    return {line[1:].strip() for line in dump.splitlines() if line.startswith("*")}


def _run(argv: list[str], *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A host command that must not hang a stop: a timeout is one step's problem."""
    return subprocess.run(argv, input=stdin, text=True, capture_output=True, check=False,
                          timeout=60)  # fmt: skip


def _restore_rules(*, family: str, saved: str) -> list[str]:
    """Restore the saved rules; empty the tables that were not in use before.

    ``iptables-restore`` replaces each table named in its input whole (rules and
    user chains), but leaves the tables the input does not name, so a table the
    node started using (``nat`` on a host that had none) is flushed by hand.
    """
    current = _save(f"{family}-save") or ""
    for table in sorted(_tables(current) - _tables(saved)):
        for flag in ("-F", "-X"):
            _run([family, "-t", table, flag])
    proc = _run([f"{family}-restore"], stdin=saved)
    if proc.returncode != 0:
        return [f"{family}-restore: {proc.stderr.strip()}"]
    return []


def _remove_netns(known: frozenset[str]) -> list[str]:
    problems = []
    for name in sorted(set(_netns_names()) - known):
        proc = _run(["ip", "netns", "delete", name])
        if proc.returncode != 0:
            problems.append(f"netns {name}: {proc.stderr.strip()}")
    return problems


def _remove_links(known: frozenset[str]) -> list[str]:
    for link in sorted(set(_link_names()) - known):
        _run(["ip", "link", "delete", link])
    # A link that goes with another (a veth's peer) is gone by now.
    return [f"link {link} stays" for link in sorted(set(_link_names()) - known)]


def _remove_fixed_paths(existing: frozenset[Path]) -> None:
    for path in FIXED_PATHS:
        if path not in existing:
            shutil.rmtree(path, ignore_errors=True)


def restore_settings(sysctls: Mapping[str, str]) -> list[str]:
    """Write the recorded kernel settings back; return those that stay changed."""
    problems = []
    for name, value in sysctls.items():
        write_sysctl(name, value)
        if read_sysctl(name) != value:
            problems.append(f"sysctl {name} stays {read_sysctl(name)} (was {value})")
    return problems


def restore_host(snapshot: HostSnapshot) -> list[str]:
    """Put back what the node changed, step by step; return what could not be restored."""
    teardown = Teardown()
    teardown.step("network namespaces", lambda: _remove_netns(snapshot.netns))
    teardown.step("links", lambda: _remove_links(snapshot.links))
    for family, saved in (("iptables", snapshot.iptables), ("ip6tables", snapshot.ip6tables)):
        if saved is not None:
            teardown.step(family, functools.partial(_restore_rules, family=family, saved=saved))
    teardown.step("folders", lambda: _remove_fixed_paths(snapshot.existing))
    teardown.step("kernel settings", lambda: restore_settings(snapshot.sysctls))
    return teardown.finish()
