"""One node per host, and what a killed node left put back by the next one.

A node changes its host (``host.py``) and :meth:`RealNode.stop` puts it back. A node
whose process is killed (a CI job cancelled, a session ended, ``kill -9``) never
stops: the bridge, the pods' network namespaces mounted under its work dir, the
iptables rules and the cgroups stay, and the next node would fail on
``ip link add cni0: File exists``.

So a node holds a lease on the host while it runs: an exclusive ``flock`` on one
file, which the kernel releases whenever the holder dies, and in that file a
:class:`NodeRecord` with what the node needs to be undone (its work dir, its
binaries and the :class:`HostSnapshot` taken before it started). The next node to
take the lease finds the record of a node that did not stop and finishes that
node's stop before it starts. A bridge of the same name with no record belongs to
something else on the host (another Kubernetes node, say), and is never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from e2e.realnode.host import (
    HostSnapshot,
    kill_node_processes,
    remove_cgroups,
    restore_host,
    unmount_below,
)

#: The lease file: in ``/run``, so a reboot (which also removes what a node set up)
#: forgets it.
LEASE_PATH = Path("/run/checkpointed-jobs-realnode.lease")


class HostBusyError(RuntimeError):
    """The host cannot take a node now; says what holds it and what to do."""


@dataclass(frozen=True)
class NodeRecord:
    """What undoes a node: written to the lease before the node changes the host."""

    VERSION = 1

    pid: int
    work_dir: Path
    owns_work_dir: bool
    bin_dir: Path
    snapshot: HostSnapshot
    cgroup: str = "kubepods"
    """The cgroup the kubelet puts every pod under, in each hierarchy."""

    def encode(self) -> str:
        return json.dumps(
            {
                "version": self.VERSION,
                "pid": self.pid,
                "workDir": str(self.work_dir),
                "ownsWorkDir": self.owns_work_dir,
                "binDir": str(self.bin_dir),
                "cgroup": self.cgroup,
                "snapshot": _snapshot_to_json(self.snapshot),
            },
            indent=2,
        )

    @classmethod
    def decode(cls, text: str) -> NodeRecord:
        """Read a record; ``ValueError`` says why one cannot be read."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version") != cls.VERSION:
            raise ValueError(f"version {data.get('version')!r}, this code reads {cls.VERSION}")
        try:
            return cls(
                pid=int(data["pid"]),
                work_dir=Path(_text(data["workDir"])),
                owns_work_dir=bool(data["ownsWorkDir"]),
                bin_dir=Path(_text(data["binDir"])),
                cgroup=_cgroup_name(data["cgroup"]),
                snapshot=_snapshot_from_json(data["snapshot"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a field is missing or malformed ({exc!r})") from None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _cgroup_name(value: Any) -> str:
    name = _text(value)
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"cgroup {name!r} is not one folder name")
    return name


def _snapshot_to_json(snapshot: HostSnapshot) -> dict[str, Any]:
    return {
        "sysctls": dict(snapshot.sysctls),
        "iptables": snapshot.iptables,
        "ip6tables": snapshot.ip6tables,
        "netns": sorted(snapshot.netns),
        "links": sorted(snapshot.links),
        "existing": sorted(str(p) for p in snapshot.existing),
    }


def _snapshot_from_json(data: Any) -> HostSnapshot:
    if not isinstance(data, dict):
        raise TypeError("snapshot is not an object")
    sysctls = data["sysctls"]
    if not isinstance(sysctls, dict):
        raise TypeError("sysctls is not an object")
    rules = {k: data[k] for k in ("iptables", "ip6tables")}
    for key, value in rules.items():
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{key} is not a string")
    return HostSnapshot(
        sysctls={_text(k): _text(v) for k, v in sysctls.items()},
        iptables=rules["iptables"],
        ip6tables=rules["ip6tables"],
        netns=frozenset(_text(n) for n in data["netns"]),
        links=frozenset(_text(n) for n in data["links"]),
        existing=frozenset(Path(_text(p)) for p in data["existing"]),
    )


class HostLease:
    """The held lease: :meth:`record` before changing the host, :meth:`release` after
    putting it back. Dropping the process releases the lock, never the record."""

    def __init__(self, *, path: Path, file: TextIO) -> None:
        self.path = path
        self._file = file

    @classmethod
    def acquire(cls, *, path: Path = LEASE_PATH) -> HostLease:
        """Take the lease, or raise :class:`HostBusyError` naming the node holding it."""
        file = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            file.close()
            raise HostBusyError(
                f"another node runs on this host ({holder}; lease {path}): stop it first "
                "(`make cluster-down` for the quick-start cluster)"
            ) from None
        except BaseException:
            file.close()
            raise
        return cls(path=path, file=file)

    def previous(self) -> NodeRecord | None:
        """The record a node left without stopping, if any."""
        self._file.seek(0)
        text = self._file.read()
        if not text.strip():
            return None
        try:
            return NodeRecord.decode(text)
        except ValueError as exc:
            raise HostBusyError(
                f"{self.path} holds a node record this code cannot read: {exc}. A node that "
                "did not stop may have left a bridge, mounts and iptables rules: check the "
                "host, then delete the file"
            ) from None

    def record(self, record: NodeRecord) -> None:
        self._write(record.encode())

    def forget(self) -> None:
        """Drop the record: the host is back as the recorded snapshot found it."""
        self._write("")

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
        self._file.close()

    def _write(self, text: str) -> None:
        self._file.seek(0)
        self._file.truncate()
        self._file.write(text)
        self._file.flush()
        os.fsync(self._file.fileno())


def _holder(path: Path) -> str:
    try:
        return f"pid {NodeRecord.decode(path.read_text(encoding='utf-8')).pid}"
    except (OSError, ValueError):
        return "a node still starting"


def link_exists(name: str) -> bool:
    return (Path("/sys/class/net") / name).exists()


def clear_node(record: NodeRecord) -> list[str]:
    """Undo a node whose components are stopped or dead; return what stays changed.

    Processes first (so nothing re-creates what follows), then the mounts that keep
    the pods' network namespaces (and their veths) alive, the cgroups, kube-proxy's
    rules, and last the snapshot's settings, links, namespaces and rules.
    """
    kill_node_processes(
        shim_binary=record.bin_dir / "containerd-shim-runc-v2",
        work_dir=record.work_dir,
        cgroup_parent=f"/{record.cgroup}",
    )
    unmount_below(record.work_dir)
    remove_cgroups(name=record.cgroup)
    kube_proxy = record.bin_dir / "kube-proxy"
    if kube_proxy.exists():
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)
    problems = restore_host(record.snapshot)
    if record.owns_work_dir:
        shutil.rmtree(record.work_dir, ignore_errors=True)
    return problems


def claim_host(
    *, bridge: str, path: Path = LEASE_PATH, log: Callable[[str], None] = lambda _: None
) -> HostLease:
    """Take the host for a node: finish the stop of a node that was killed, and
    refuse a host where ``bridge`` exists without a record (someone else's)."""
    lease = HostLease.acquire(path=path)
    try:
        previous = lease.previous()
        if previous is not None:
            log(
                f"a node (pid {previous.pid}, work dir {previous.work_dir}) was killed "
                "before it stopped; putting the host back as it found it"
            )
            for problem in clear_node(previous):
                log(f"host not fully restored: {problem}")
            lease.forget()
        if link_exists(bridge) and previous is not None:
            raise HostBusyError(
                f"the bridge {bridge!r} of the killed node could not be removed; delete it "
                f"(`ip link delete {bridge}`) and start again"
            )
        if link_exists(bridge):
            raise HostBusyError(
                f"the host already has a network link {bridge!r} that no node of this project "
                f"recorded in {path}: another Kubernetes node, or one from before the lease, "
                f"may own it. Stop what uses it, or delete it (`ip link delete {bridge}`)"
            )
    except BaseException:
        lease.release()
        raise
    return lease
