"""What a node changes on its host, recorded before it starts and put back after.

A kubelet, kube-proxy and the CNI plugins change the machine they run on: kernel
settings (the kubelet sets ``kernel.panic``, ``kernel.panic_on_oops`` and
``vm.overcommit_memory``; kube-proxy sets ``route_localnet``), iptables rules and
chains, a bridge, network namespaces, mounts under the kubelet's root, cgroups,
and container processes whose shims outlive containerd. A test run must leave the
machine as it found it, so :class:`HostSnapshot` records the settings and rules
first and :func:`restore_host` puts them back, in order, after the node stopped.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Kernel settings the node (kubelet, kube-proxy, the bridge) may change.
SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
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


def _restore_rules(*, family: str, saved: str) -> list[str]:
    """Restore the saved rules; empty the tables that were not in use before.

    ``iptables-restore`` replaces each table named in its input whole (rules and
    user chains), but leaves the tables the input does not name, so a table the
    node started using (``nat`` on a host that had none) is flushed by hand.
    """
    current = _save(f"{family}-save") or ""
    for table in sorted(_tables(current) - _tables(saved)):
        for flag in ("-F", "-X"):
            subprocess.run([family, "-t", table, flag], capture_output=True, check=False)
    proc = subprocess.run(
        [f"{family}-restore"], input=saved, text=True, capture_output=True, check=False
    )
    if proc.returncode != 0:
        return [f"{family}-restore: {proc.stderr.strip()}"]
    return []


def restore_host(snapshot: HostSnapshot) -> list[str]:
    """Put back what the node changed; return what could not be restored."""
    problems: list[str] = []
    for name in sorted(set(_netns_names()) - snapshot.netns):
        proc = subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        if proc.returncode != 0:
            problems.append(f"netns {name}: {proc.stderr.decode().strip()}")
    for link in sorted(set(_link_names()) - snapshot.links):
        subprocess.run(["ip", "link", "delete", link], capture_output=True, check=False)
    for family, saved in (("iptables", snapshot.iptables), ("ip6tables", snapshot.ip6tables)):
        if saved is not None:
            problems.extend(_restore_rules(family=family, saved=saved))
    for path in FIXED_PATHS:
        if path not in snapshot.existing:
            shutil.rmtree(path, ignore_errors=True)
    for name, value in snapshot.sysctls.items():
        write_sysctl(name, value)
        if read_sysctl(name) != value:
            problems.append(f"sysctl {name} stays {read_sysctl(name)} (was {value})")
    return problems
