"""One node per host, and what a killed node left put back by the next one.

A node changes its host (``host.py``) and :meth:`RealNode.stop` puts it back. A node
whose process is killed (a CI job cancelled, a session ended, ``kill -9``) never
stops: the bridge, the pods' network namespaces mounted under its work dir, the
iptables rules and the cgroups stay, and the next node would fail on
``ip link add cni0: File exists``.

So a node holds a lease on the host while it runs: an exclusive ``flock`` on one
file, which the kernel releases whenever the holder dies, and in that file a
:class:`NodeRecord` with what the node needs to be undone (its work dir, its
binaries and the :class:`HostSnapshot` taken before it started). The kind scenarios'
Docker engine takes the same lease and writes an :class:`EngineRecord` of its own
(``e2e/kind/engine_record.py``). The next holder to take the lease finds the record
of a holder that did not stop and finishes that holder's stop before it starts,
whichever kind it was. A bridge of the same name with no record belongs to something
else on the host (another Kubernetes node, say), and is never touched.

The file holds one JSON object, format version 2: ``holder`` (``node`` or
``kindEngine``) and that holder's fields. Version 1, written before the kind engine
took part, is a node's record without ``holder``, and is still read.
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
from typing import Any, ClassVar, TextIO

from e2e.kind.engine_record import EngineRecord, clear_engine
from e2e.realnode.host import (
    HostSnapshot,
    Teardown,
    kill_node_processes,
    remove_cgroups,
    restore_host,
    text_of,
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

    HOLDER: ClassVar[str] = "node"

    pid: int
    work_dir: Path
    owns_work_dir: bool
    bin_dir: Path
    snapshot: HostSnapshot
    cgroup: str = "kubepods"
    """The cgroup the kubelet puts every pod under, in each hierarchy."""

    def to_json(self) -> dict[str, Any]:
        """The record's fields (the lease adds its format version and holder)."""
        return {
            "pid": self.pid,
            "workDir": str(self.work_dir),
            "ownsWorkDir": self.owns_work_dir,
            "binDir": str(self.bin_dir),
            "cgroup": self.cgroup,
            "snapshot": self.snapshot.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeRecord:
        return cls(
            pid=int(data["pid"]),
            work_dir=Path(text_of(data["workDir"])),
            owns_work_dir=bool(data["ownsWorkDir"]),
            bin_dir=Path(text_of(data["binDir"])),
            cgroup=_cgroup_name(data["cgroup"]),
            snapshot=HostSnapshot.from_json(data["snapshot"]),
        )


HostRecord = NodeRecord | EngineRecord
"""What the lease holds: the record of a real node, or of the kind scenarios' engine."""

#: The lease file's format: 2 names the holder; 1 (a node's record) is still read.
LEASE_VERSION = 2
_HOLDERS: dict[str, type[NodeRecord] | type[EngineRecord]] = {
    NodeRecord.HOLDER: NodeRecord,
    EngineRecord.HOLDER: EngineRecord,
}


def encode_record(record: HostRecord) -> str:
    return json.dumps({"version": LEASE_VERSION, "holder": record.HOLDER, **record.to_json()},
                      indent=2)  # fmt: skip


def decode_record(text: str) -> HostRecord:
    """Read a record; ``ValueError`` says why one cannot be read."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    version = data.get("version")
    holder: Any
    if version == 1:
        holder = NodeRecord.HOLDER  # before the kind engine took the lease
    elif version == LEASE_VERSION:
        holder = data.get("holder")
    else:
        raise ValueError(f"version {version!r}, this code reads 1 and {LEASE_VERSION}")
    kind = _HOLDERS.get(holder) if isinstance(holder, str) else None
    if kind is None:
        raise ValueError(f"holder {holder!r} is unknown, this code reads "
                         f"{', '.join(sorted(_HOLDERS))}")  # fmt: skip
    try:
        return kind.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a field is missing or malformed ({exc!r})") from None


def describe(record: HostRecord) -> str:
    """The holder, for a message: which run, and where its state is."""
    if isinstance(record, NodeRecord):
        return f"a node (pid {record.pid}, work dir {record.work_dir})"
    where = "the system Docker engine" if record.private is None else (
        f"a private Docker engine in {record.private.run_dir}")
    return f"a kind run (pid {record.pid}, on {where})"


def _cgroup_name(value: Any) -> str:
    name = text_of(value)
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"cgroup {name!r} is not one folder name")
    return name


class HostLease:
    """The held lease: :meth:`record` before changing the host, :meth:`release` after
    putting it back. Dropping the process releases the lock, never the record."""

    def __init__(self, *, path: Path, file: TextIO) -> None:
        self.path = path
        self._file = file

    @classmethod
    def acquire(cls, *, path: Path = LEASE_PATH) -> HostLease:
        """Take the lease, or raise :class:`HostBusyError` naming the run holding it."""
        file = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            file.close()
            raise HostBusyError(
                f"another node runs on this host: {holder} holds the lease {path}; stop it "
                "first (`make cluster-down` for the quick-start cluster)"
            ) from None
        except BaseException:
            file.close()
            raise
        return cls(path=path, file=file)

    def previous(self) -> HostRecord | None:
        """The record a holder left without stopping, if any."""
        self._file.seek(0)
        text = self._file.read()
        if not text.strip():
            return None
        try:
            return decode_record(text)
        except ValueError as exc:
            raise HostBusyError(
                f"{self.path} holds a record this code cannot read: {exc}. A node or kind "
                "run that did not stop may have left a bridge, routes, mounts, iptables rules "
                "and kernel settings: check the host, then delete the file"
            ) from None

    def record(self, record: HostRecord) -> None:
        """Write what undoes the holder: before each change it makes to the host."""
        self._write(encode_record(record))

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
        return describe(decode_record(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return "a node or kind run still starting"


def link_exists(name: str) -> bool:
    return (Path("/sys/class/net") / name).exists()


def clear_node(record: NodeRecord) -> list[str]:
    """Undo a node whose components are stopped or dead; return what stays changed.

    Processes first (so nothing re-creates what follows), then the mounts that keep
    the pods' network namespaces (and their veths) alive, the cgroups, kube-proxy's
    rules, and last the snapshot's settings, links, namespaces and rules. Each step
    runs whatever the ones before it did (:class:`Teardown`).
    """
    teardown = Teardown()
    teardown.step("processes", lambda: _kill_processes(record))
    teardown.step("mounts", lambda: unmount_below(record.work_dir))
    teardown.step("cgroups", lambda: remove_cgroups(name=record.cgroup))
    teardown.step("kube-proxy --cleanup", lambda: _kube_proxy_cleanup(record.bin_dir))
    teardown.step("host", lambda: restore_host(record.snapshot))
    if record.owns_work_dir:
        teardown.step("work dir", lambda: shutil.rmtree(record.work_dir, ignore_errors=True))
    return teardown.finish()


def _kill_processes(record: NodeRecord) -> None:
    kill_node_processes(
        shim_binary=record.bin_dir / "containerd-shim-runc-v2",
        work_dir=record.work_dir,
        cgroup_parent=f"/{record.cgroup}",
    )


def _kube_proxy_cleanup(bin_dir: Path) -> list[str]:
    kube_proxy = bin_dir / "kube-proxy"
    if not kube_proxy.exists():
        return []
    proc = subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip
    return [] if proc.returncode == 0 else [proc.stderr.strip()[-500:]]


def clear_record(record: HostRecord) -> list[str]:
    """Finish the stop of whichever holder left ``record``; return what stays changed."""
    if isinstance(record, NodeRecord):
        return clear_node(record)
    return clear_engine(record)


def claim_host(
    *, bridge: str, path: Path = LEASE_PATH, log: Callable[[str], None] = lambda _: None
) -> HostLease:
    """Take the host for a node or a kind run: finish the stop of one that was killed,
    and refuse a host where ``bridge`` exists without a record (someone else's)."""
    lease = HostLease.acquire(path=path)
    try:
        previous = lease.previous()
        if previous is not None:
            log(f"{describe(previous)} was killed before it stopped; putting the host back "
                "as it found it")  # fmt: skip
            for problem in clear_record(previous):
                log(f"host not fully restored: {problem}")
            lease.forget()
        if link_exists(bridge) and isinstance(previous, NodeRecord):
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
