"""The ``rocksdb`` state backend: keyed state on local disk, incremental checkpoints.

State lives in one RocksDB database per keyed operator and subtask (through
``rocksdict``), so it may be much larger than memory. Every key starts with its
key group (two bytes, big-endian), then the state name, then the pickled key;
values are pickled. Key groups first means a key-group range is one contiguous
key range: a restore at another parallelism copies exactly its own range out of
each old database, and drops the rest with one range delete.

A snapshot has two parts, as in Flink's RocksDB backend. The synchronous part
is a RocksDB checkpoint: it flushes the memtable and hard-links the live table
files into a new directory, which costs milliseconds and copies nothing. The
asynchronous part (the uploader thread) sends each table file that no completed
checkpoint has uploaded yet to the job's shared directory under a name no other
upload uses, and writes the small private files plus the list of referenced
shared files as the subtask's state file. Table files never change once
written, so a file the last completed checkpoint uploaded is referenced again,
not uploaded again: with 1% of the keys changed, a checkpoint uploads roughly
the new 1%, and compactions' output.

Only the files of a checkpoint this backend was told completed are reused: a
file uploaded for a checkpoint that was later aborted may be deleted as part of
that checkpoint's leftovers. Which shared file may be deleted is decided by the
driver (:mod:`cjob_checkpoint.shared_state`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import struct
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import rocksdict

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.metadata import SharedStateFile
from job_runtime.state.backend import UploadedState
from job_runtime.state.rocksdb_format import (
    RocksDBStateFile,
    download_file,
    is_rocksdb_state,
    upload_file,
)

DEFAULT_DIR_NAME = "cjob-rocksdb"


def default_local_dir() -> Path:
    """Where working files go without ``--state-dir``: Spark's scratch directory.

    Spark on Kubernetes points ``SPARK_LOCAL_DIRS`` at an emptyDir volume of the
    executor pod; elsewhere (local mode) the system's temporary directory.
    """
    first = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return Path(first or tempfile.gettempdir()) / DEFAULT_DIR_NAME

_KEY_PROTOCOL = 5
"""Fixed pickle protocol for keys: equal keys must encode to equal bytes."""


def _group_prefix(key_group: int) -> bytes:
    return struct.pack(">H", key_group)


def _range_end(stop: int) -> bytes:
    """The first key after key group ``stop - 1``."""
    return struct.pack(">H", stop) if stop < 0x10000 else b"\xff\xff\xff"


def _name_prefix(name: str) -> bytes:
    encoded = name.encode()
    return struct.pack(">H", len(encoded)) + encoded


def _open(path: Path) -> rocksdict.Rdict:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(str(path), options)
    # No write-ahead log: checkpoints are the durability; a crash restores one.
    write = rocksdict.WriteOptions()
    write.disable_wal = True  # type: ignore[method-assign,assignment]  # a property at run time
    db.set_write_options(write)
    return db


def _open_read_only(path: Path) -> rocksdict.Rdict:
    return rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True),
                           access_type=rocksdict.AccessType.read_only())


def _remove_dir(path: Path, db: list[rocksdict.Rdict]) -> None:
    for handle in db:
        try:
            handle.close()
        except Exception:
            pass
    shutil.rmtree(path, ignore_errors=True)


def materialize(state: RocksDBStateFile, path: Path, *, storage: CheckpointStorage,
                counts: list[int]) -> None:
    """Write a snapshot's private files and download its shared ones into ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    for name, body in state.private.items():
        (path / name).write_bytes(body)
    for shared in state.shared:
        download_file(storage.fs, handle=shared.handle, path=path / shared.name)
        counts[0] += 1
        counts[1] += shared.handle.size_bytes


def read_entries(state: RocksDBStateFile, *, storage: CheckpointStorage, key_groups: range,
                 workdir: Path) -> Iterator[tuple[str, int, Any, Any]]:
    """``(name, key_group, key, value)`` of a snapshot's entries in ``key_groups``.

    For backends that keep state otherwise (``hashmap`` restoring a ``rocksdb``
    checkpoint): the snapshot is downloaded below ``workdir`` and read in order.
    """
    path = Path(tempfile.mkdtemp(prefix="rocksdb-read-", dir=workdir))
    try:
        materialize(state, path, storage=storage, counts=[0, 0])
        source = _open_read_only(path)
        try:
            end = _range_end(key_groups.stop)
            it = source.iter()
            it.seek(_group_prefix(key_groups.start))
            while it.valid():
                raw: bytes = it.key()
                if raw >= end:
                    break
                key_group, length = struct.unpack(">HH", raw[:4])
                name = raw[4:4 + length].decode()
                yield (name, key_group, pickle.loads(raw[4 + length:]),
                       pickle.loads(it.value()))
                it.next()
        finally:
            source.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreStats:
    """What the last restore did (the benchmark and tests read it)."""

    downloaded_files: int
    downloaded_bytes: int
    seconds: float


class RocksDBStateBackend:
    """Keyed state of the key groups one subtask owns, in a local RocksDB database."""

    def __init__(self, *, key_groups: range, operator: str, subtask: int, local_dir: str = "",
                 storage: CheckpointStorage | None = None) -> None:
        self.key_groups = key_groups
        self._operator = operator
        self._subtask = subtask
        self._storage = storage
        base = Path(local_dir) if local_dir else default_local_dir()
        base.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=f"{operator}-{subtask}-", dir=base))
        self._instance = uuid.uuid4().hex[:12]
        self._db_path = self.root / "db"
        self._db = _open(self._db_path)
        self._handles = [self._db]
        self._lock = threading.Lock()
        self._snapshots = 0
        self._confirmed: dict[str, SharedStateFile] = {}
        self._uploaded: dict[int, dict[str, SharedStateFile]] = {}
        self._name_prefixes: dict[str, bytes] = {}
        self.last_restore: RestoreStats | None = None
        self._finalizer = weakref.finalize(self, _remove_dir, self.root, self._handles)

    # ------------------------------------------------------------------ keys

    def _prefix(self, name: str) -> bytes:
        prefix = self._name_prefixes.get(name)
        if prefix is None:
            prefix = self._name_prefixes[name] = _name_prefix(name)
        return prefix

    def _key(self, name: str, key_group: int, key: Any) -> bytes:
        return (_group_prefix(key_group) + self._prefix(name)
                + pickle.dumps(key, protocol=_KEY_PROTOCOL))

    # ------------------------------------------------------------------ state

    def get(self, name: str, key_group: int, key: Any, default: Any = None) -> Any:
        data = self._db.get(self._key(name, key_group, key))
        return default if data is None else pickle.loads(data)

    def put(self, name: str, key_group: int, key: Any, value: Any) -> None:
        self._db.put(self._key(name, key_group, key),
                     pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def delete(self, name: str, key_group: int, key: Any) -> None:
        self._db.delete(self._key(name, key_group, key))

    def map_put(self, name: str, key_group: int, key: Any, user_key: Any, value: Any) -> None:
        # A map is one value: read (a fresh copy, unpickled), change, write back.
        current = self.get(name, key_group, key, None)
        updated: dict[Any, Any] = {} if current is None else current
        updated[user_key] = value
        self.put(name, key_group, key, updated)

    def map_remove(self, name: str, key_group: int, key: Any, user_key: Any) -> None:
        current = self.get(name, key_group, key, None)
        if current is not None and user_key in current:
            del current[user_key]
            self.put(name, key_group, key, current)

    def key_count(self) -> int:
        count = 0
        it = self._db.iter()
        it.seek_to_first()
        while it.valid():
            count += 1
            it.next()
        return count

    def iter_entries(self, name: str, *, key_groups: range | None = None
                     ) -> Iterator[tuple[int, Any, Any]]:
        suffix = self._prefix(name)
        for key_group in key_groups if key_groups is not None else self.key_groups:
            prefix = _group_prefix(key_group) + suffix
            it = self._db.iter()
            it.seek(prefix)
            while it.valid():
                raw: bytes = it.key()
                if not raw.startswith(prefix):
                    break
                yield key_group, pickle.loads(raw[len(prefix):]), pickle.loads(it.value())
                it.next()

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> RocksDBSnapshot:
        """The synchronous part: flush and hard-link the live files (no copies)."""
        self._snapshots += 1
        directory = self.root / "snapshots" / str(self._snapshots)
        directory.parent.mkdir(exist_ok=True)
        rocksdict.Checkpoint(self._db).create_checkpoint(str(directory))
        return RocksDBSnapshot(backend=self, directory=directory)

    def reusable(self) -> dict[str, SharedStateFile]:
        """Table files of the last completed checkpoint, by their local name."""
        with self._lock:
            return dict(self._confirmed)

    def uploaded(self, checkpoint_id: int, files: Iterable[SharedStateFile]) -> None:
        with self._lock:
            self._uploaded[checkpoint_id] = {f.name: f for f in files}

    def notify_complete(self, checkpoint_id: int) -> None:
        with self._lock:
            files = self._uploaded.get(checkpoint_id)
            if files is not None:
                self._confirmed = files
            for older in [c for c in self._uploaded if c <= checkpoint_id]:
                del self._uploaded[older]

    def shared_name(self, checkpoint_id: int, local_name: str) -> str:
        """Unique per upload: operator, subtask, this database's id, checkpoint, file."""
        return (f"{self._operator}-{self._subtask}-{self._instance}-{checkpoint_id}-"
                f"{local_name}")

    # ------------------------------------------------------------------ restore

    def restore(self, blobs: Iterable[bytes]) -> int:
        """Load the owned key groups from the state files of any parallelism.

        One state file with exactly this subtask's key groups (a restart at the same
        parallelism) becomes the database itself, and its shared files stay reusable;
        the count returned is then RocksDB's estimate. Otherwise each old database is
        downloaded, opened read-only, and its part of this subtask's key-group range
        copied over (counted exactly). Full snapshots of the ``hashmap`` backend are
        loaded key by key, so a job may switch backends at a restart.
        """
        started = time.perf_counter()
        files: list[RocksDBStateFile] = []
        full: list[bytes] = []
        for blob in blobs:
            if is_rocksdb_state(blob):
                files.append(RocksDBStateFile.from_bytes(blob))
            else:
                full.append(blob)
        files = [f for f in files if f.key_groups[0] < self.key_groups.stop
                 and self.key_groups.start < f.key_groups[1]]
        restored = self._restore_full(full)
        if not files:
            return restored
        storage = self._storage
        if storage is None:
            raise ValueError("the rocksdb state backend needs checkpoint storage to restore")
        own = (self.key_groups.start, self.key_groups.stop)
        downloaded = [0, 0]
        if len(files) == 1 and files[0].key_groups == own and not full:
            self._db.close()
            self._handles.remove(self._db)
            shutil.rmtree(self._db_path)
            materialize(files[0], self._db_path, storage=storage, counts=downloaded)
            self._db = _open(self._db_path)
            self._handles.append(self._db)
            # Reused only when they are this job's: another job's checkpoint (a foreign
            # restore) keeps its files, and may delete them.
            own_dir = storage.shared_dir.rstrip("/") + "/"
            with self._lock:
                self._confirmed = {f.name: f for f in files[0].shared
                                   if f.handle.uri.startswith(own_dir)}
            # RocksDB's estimate, not a scan: counting gigabytes of keys one by one
            # would cost more than the restore (it is what the log reports).
            restored = int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)
        else:
            for number, state in enumerate(files):
                path = self.root / "restore" / str(number)
                materialize(state, path, storage=storage, counts=downloaded)
                restored += self._copy_owned(path)
                shutil.rmtree(path, ignore_errors=True)
        self.last_restore = RestoreStats(downloaded_files=downloaded[0],
                                         downloaded_bytes=downloaded[1],
                                         seconds=time.perf_counter() - started)
        return restored

    def _restore_full(self, blobs: list[bytes]) -> int:
        """Owned entries of ``hashmap`` snapshots, written key by key."""
        from job_runtime.state.hashmap import deserialize_keyed_state

        restored = 0
        for blob in blobs:
            for key_group, tables in deserialize_keyed_state(blob).items():
                if key_group not in self.key_groups:
                    continue
                for name, entries in tables.items():
                    for key, value in entries.items():
                        self.put(name, key_group, key, value)
                    restored += len(entries)
        return restored

    def _copy_owned(self, path: Path) -> int:
        source = _open_read_only(path)
        copied = 0
        try:
            end = _range_end(self.key_groups.stop)
            it = source.iter()
            it.seek(_group_prefix(self.key_groups.start))
            batch = rocksdict.WriteBatch(raw_mode=True)
            while it.valid():
                key: bytes = it.key()
                if key >= end:
                    break
                batch.put(key, it.value())
                copied += 1
                if copied % 10_000 == 0:
                    self._db.write(batch)
                    batch = rocksdict.WriteBatch(raw_mode=True)
                it.next()
            self._db.write(batch)
        finally:
            source.close()
        return copied

    def compact(self) -> None:
        """A full manual compaction: what a bulk load ends with (the benchmark settles
        its freshly filled database this way before measuring checkpoints)."""
        self._db.compact_range(None, None)

    def close(self) -> None:
        self._finalizer()


class RocksDBSnapshot:
    """A RocksDB checkpoint directory waiting for the uploader."""

    def __init__(self, *, backend: RocksDBStateBackend, directory: Path) -> None:
        self._backend = backend
        self._directory = directory
        self.key_groups = (backend.key_groups.start, backend.key_groups.stop)

    def upload(self, *, storage: CheckpointStorage, checkpoint_id: int, operator: str,
               subtask: int, full: bool = False) -> UploadedState:
        """New table files to the shared directory, the rest into the state file.

        ``full`` uploads every table file again (the benchmark's baseline).
        """
        try:
            reusable = {} if full else self._backend.reusable()
            private: dict[str, bytes] = {}
            shared: list[SharedStateFile] = []
            uploaded = 0
            for entry in sorted(os.scandir(self._directory), key=lambda e: e.name):
                path = Path(entry.path)
                if not entry.name.endswith(".sst"):
                    private[entry.name] = path.read_bytes()
                    continue
                known = reusable.get(entry.name)
                if known is not None:
                    shared.append(known)
                    continue
                uri = storage.shared_uri(self._backend.shared_name(checkpoint_id, entry.name))
                handle = upload_file(storage.fs, uri=uri, path=path)
                uploaded += handle.size_bytes
                shared.append(SharedStateFile(name=entry.name, handle=handle))
            state = RocksDBStateFile(key_groups=self.key_groups, private=private,
                                     shared=tuple(shared))
            handle = storage.write_state(checkpoint_id, operator, subtask, state.to_bytes())
            self._backend.uploaded(checkpoint_id, shared)
            return UploadedState(handle=handle, shared=tuple(shared),
                                 uploaded_bytes=uploaded + handle.size_bytes)
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)
