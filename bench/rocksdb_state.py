"""RocksDB state: incremental checkpoints of a large keyed state, 1% of keys changed per interval.

Measured at the state-backend level, in this process, for ONE subtask's
``RocksDBStateBackend`` writing to ``file://`` checkpoint storage, the way a keyed
task and its uploader take a checkpoint:

1. the synchronous part - ``backend.snapshot()`` (flush plus a RocksDB checkpoint:
   hard links, no copies);
2. the asynchronous part - ``snapshot.upload()``: table files no completed
   checkpoint uploaded go to the shared directory, the small private files and
   the list of shared files into the subtask's state file.

The state is filled to ``--size-gb`` (the issue's target is 5 GB; the default is
scaled to run in a few minutes here) and settled by a full compaction (as a bulk
load would end; ``--no-settle`` measures while RocksDB still compacts the fill),
then ``--intervals`` times ``--changed`` percent of the keys get new values and an
incremental checkpoint is taken. Compactions RocksDB runs meanwhile rewrite table
files, which the next incremental checkpoint must upload: they show as spikes.

Baseline, in the same run: a full (non-incremental) upload of the same database
at the last interval, every table file uploaded again. Restore: a new backend
downloads the last incremental checkpoint's files and opens them (a restart at
the same parallelism).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from bench.common import (
    fresh_dir,
    median,
    print_table,
    remove_dir,
    require_free_space,
    target_entry,
    update_summary,
    write_result,
)

MIB = 1024 * 1024
GIB = 1024 * MIB
MAX_P = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-gb", type=float, default=0.5,
                        help="keyed state to build, in GiB of values (default 0.5; the "
                             "issue's target is 5)")
    parser.add_argument("--value-bytes", type=int, default=1000,
                        help="size of each value (random, so compression cannot shrink it)")
    parser.add_argument("--changed", type=float, default=1.0,
                        help="percent of the keys given new values per interval (default 1)")
    parser.add_argument("--intervals", type=int, default=5,
                        help="incremental checkpoints after the first one (default 5)")
    parser.add_argument("--no-settle", action="store_true",
                        help="measure right after the fill, while RocksDB still compacts it "
                             "(default: a full compaction first, as after a bulk load)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the working directory (bench/work/rocksdb-state-*)")


def _fill(backend: Any, keys: list[int], *, value_bytes: int, pool: bytes, seed: int) -> float:
    from job_runtime.records import key_group_of

    rng = random.Random(seed)
    span = len(pool) - value_bytes
    started = time.perf_counter()
    for key in keys:
        offset = rng.randrange(span)
        backend.put("state", key_group_of(key, MAX_P), key, pool[offset:offset + value_bytes])
    return time.perf_counter() - started


def _checkpoint(backend: Any, storage: Any, checkpoint_id: int, *, full: bool = False,
                previous: set[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    snapshot = backend.snapshot()
    sync = time.perf_counter() - started
    started = time.perf_counter()
    uploaded = snapshot.upload(storage=storage, checkpoint_id=checkpoint_id, operator="state-1",
                               subtask=0, full=full)
    upload = time.perf_counter() - started
    referenced = {f.handle.uri for f in uploaded.shared}
    new = referenced - (previous or set())
    return {
        "checkpoint": checkpoint_id,
        "full": full,
        "sync_ms": sync * 1000.0,
        "upload_s": upload,
        "duration_s": sync + upload,
        "uploaded_bytes": uploaded.uploaded_bytes,
        "uploaded_files": len(new),
        "referenced_files": len(referenced),
        "state_bytes": sum(f.handle.size_bytes for f in uploaded.shared)
                       + uploaded.handle.size_bytes,
        "handle": uploaded.handle,
        "referenced": referenced,
    }


def disk_needed(*, state_bytes: int) -> int:
    """Scratch bytes a run holds at its peak for ``state_bytes`` of state.

    Measured at 5 GiB: the database (5.5 GB), the checkpoints, full and incremental
    (8.7 GB), and the restored copy (5.6 GB), 20 GB in all; with room, 4.5 times.
    """
    return int(4.5 * state_bytes)


def run(ns: argparse.Namespace) -> None:
    from cjob_checkpoint.checkpoint_storage import CheckpointStorage
    from job_runtime.state.rocksdb import RocksDBStateBackend

    work = fresh_dir("rocksdb-state")
    try:
        require_free_space(benchmark="rocksdb-state", directory=work,
                           needed=disk_needed(state_bytes=int(ns.size_gb * GIB)),
                           what=f"{ns.size_gb:.1f} GiB of state")
        storage = CheckpointStorage((work / "checkpoints").as_uri(), "bench-u1")
        backend = RocksDBStateBackend(key_groups=range(0, MAX_P), operator="state-1", subtask=0,
                                      local_dir=str(work / "local"), storage=storage)
        keys = max(1, int(ns.size_gb * GIB) // ns.value_bytes)
        pool = random.Random(1).randbytes(16 * MIB)
        print(f"filling {keys:,} keys of {ns.value_bytes} bytes "
              f"({keys * ns.value_bytes / GIB:.2f} GiB)", flush=True)
        fill_s = _fill(backend, list(range(keys)), value_bytes=ns.value_bytes, pool=pool, seed=2)
        if not ns.no_settle:
            started = time.perf_counter()
            backend.compact()
            print(f"settled by a full compaction in {time.perf_counter() - started:.1f} s",
                  flush=True)

        rows: list[dict[str, Any]] = [_checkpoint(backend, storage, 1)]
        backend.notify_complete(1)
        rng = random.Random(3)
        changed = max(1, int(keys * ns.changed / 100.0))
        for interval in range(1, ns.intervals + 1):
            _fill(backend, rng.sample(range(keys), changed), value_bytes=ns.value_bytes,
                  pool=pool, seed=100 + interval)
            row = _checkpoint(backend, storage, interval + 1, previous=rows[-1]["referenced"])
            backend.notify_complete(interval + 1)
            rows.append(row)
        baseline = _checkpoint(backend, storage, ns.intervals + 2, full=True)

        restored = RocksDBStateBackend(key_groups=range(0, MAX_P), operator="state-1",
                                       subtask=0, local_dir=str(work / "restore"),
                                       storage=storage)
        blob = storage.read_state(rows[-1]["handle"])
        started = time.perf_counter()
        restored.restore([blob])
        restore_s = time.perf_counter() - started
        assert restored.last_restore is not None
        restore = {"seconds": restore_s, "files": restored.last_restore.downloaded_files,
                   "bytes": restored.last_restore.downloaded_bytes}
        restored.close()
        backend.close()
        _report(ns, keys=keys, fill_s=fill_s, rows=rows, baseline=baseline, restore=restore)
    finally:
        if not ns.keep:
            remove_dir(work)


def _report(ns: argparse.Namespace, *, keys: int, fill_s: float, rows: list[dict[str, Any]],
            baseline: dict[str, Any], restore: dict[str, Any]) -> None:
    table = [[("full (baseline)" if r["full"] else
               "first" if r["checkpoint"] == 1 else f"+{ns.changed:g}% #{r['checkpoint'] - 1}"),
              r["sync_ms"], r["upload_s"], r["duration_s"], r["uploaded_bytes"] / MIB,
              r["uploaded_files"], r["referenced_files"], r["state_bytes"] / MIB]
             for r in [*rows, baseline]]
    print_table(f"RocksDB state, {keys:,} keys, {ns.changed:g}% changed per interval "
                f"(fill {fill_s:.1f} s)",
                ["checkpoint", "sync ms", "upload s", "total s", "uploaded MiB",
                 "new files", "files", "state MiB"], table)
    incremental = rows[1:]
    inc_duration = median(r["duration_s"] for r in incremental) if incremental else float("nan")
    inc_bytes = median(r["uploaded_bytes"] for r in incremental) if incremental else float("nan")
    print(f"restore (same parallelism): {restore['seconds']:.2f} s, {restore['files']} files, "
          f"{restore['bytes'] / MIB:.1f} MiB downloaded", flush=True)
    print(f"incremental median: {inc_duration:.2f} s and {inc_bytes / MIB:.1f} MiB per "
          f"checkpoint; full upload {baseline['duration_s']:.2f} s and "
          f"{baseline['uploaded_bytes'] / MIB:.1f} MiB", flush=True)
    clean = [{k: v for k, v in r.items() if k not in ("handle", "referenced")}
             for r in [*rows, baseline]]
    write_result("rocksdb-state", {
        "scale": {"size_gb": ns.size_gb, "keys": keys, "value_bytes": ns.value_bytes,
                  "changed_percent": ns.changed, "intervals": ns.intervals},
        "fill_seconds": fill_s, "checkpoints": clean, "restore": restore,
        "incremental_median": {"duration_s": inc_duration, "uploaded_bytes": inc_bytes},
    })
    ratio = inc_bytes / baseline["uploaded_bytes"] if baseline["uploaded_bytes"] else None
    update_summary({"rocksdb-incremental-bytes": target_entry(
        value=ratio, target=0.1, unit="incremental / full bytes uploaded",
        met=None if ratio is None else ratio <= 0.1, baseline=baseline["uploaded_bytes"],
        note=f"{ns.size_gb:g} GiB, {ns.changed:g}% of keys changed per interval")})
