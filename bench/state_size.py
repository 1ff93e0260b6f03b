"""Benchmark 4: checkpoint duration against state size, file storage and the S3 API.

Measured at the state-backend level, in this process, for ONE subtask (a job
of parallelism P uploads P such files in parallel, so this is the slowest
case per byte): the keyed state is filled, then a checkpoint is taken the way
a keyed task and its uploader take it:

1. the synchronous part - ``HashMapStateBackend.snapshot()`` (references to the
   per-key-group dicts, copy-on-write) or ``AggregateOperator.snapshot()``
   (array copies);
2. serialisation - ``snapshot.serialize()`` (background thread in a job);
3. upload - ``CheckpointStorage.write_state`` (``file://``: temp file, fsync,
   rename; ``s3://``: moto's S3 server on loopback, started here).

A full checkpoint is 1 + 2 + 3. Two kinds of state: ``hashmap`` (what
``reduce``/``process`` keep: a dict per key group, values of ``--value-bytes``
bytes) at every size, and ``aggregate`` (numeric accumulators of the vectorised
``aggregate``) up to ``--aggregate-max-mb``. S3 sizes are capped by
``--s3-max-mb`` because moto keeps every object in memory and is slow.

Baseline: writing the same number of bytes as one plain file (open, write,
fsync) or one plain ``put_object``, in the same run: the floor a checkpoint
of that size cannot beat on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    env_int,
    fresh_dir,
    median,
    plot_path,
    print_table,
    pyplot,
    remove_dir,
    target_entry,
    update_summary,
    write_result,
)

MIB = 1024 * 1024
TARGET_SECONDS = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes-mb", default=os.environ.get("BENCH_STATE_SIZES_MB",
                                                            "10,100,256,1024"),
                        help="state sizes in MiB, comma separated (default 10,100,256,1024)")
    parser.add_argument("--s3-max-mb", type=int, default=env_int("BENCH_S3_MAX_MB", 256),
                        help="largest state written to the S3 API (default 256)")
    parser.add_argument("--aggregate-max-mb", type=int, default=100,
                        help="largest aggregate-operator state (default 100)")
    parser.add_argument("--value-bytes", type=int, default=1024,
                        help="size of each hashmap value (default 1024)")
    parser.add_argument("--repeat", type=int, default=env_int("BENCH_REPEAT", 3))
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 API")


# ---------------------------------------------------------------------- state


def build_hashmap_state(*, size_bytes: int, value_bytes: int) -> Any:
    """A HashMapStateBackend over 128 key groups holding about ``size_bytes``."""
    from job_runtime.records import key_group_of
    from job_runtime.state.hashmap import HashMapStateBackend

    backend = HashMapStateBackend(key_groups=range(0, 128))
    entries = max(1, size_bytes // (value_bytes + 24))
    pool = os.urandom(value_bytes * 64)
    for key in range(entries):
        offset = (key % 63) * value_bytes + key % 17
        value = pool[offset:offset + value_bytes]
        backend.put("state", key_group_of(key, 128), key, value)
    return backend


def build_aggregate_state(*, size_bytes: int) -> Any:
    """An AggregateOperator (count, sum, max) filled through its own ``process``."""
    import numpy as np
    import pyarrow as pa

    from job_runtime.operators.keyed import AggregateOperator
    from job_runtime.pipeline import KeyBy, KeyedKind, KeyedOp
    from job_runtime.records import Batch

    op = KeyedOp(kind=KeyedKind.AGGREGATE, uid="agg", key=KeyBy(key="key", uid="kb"),
                 aggregates=(("n", "count", None), ("total", "sum", "value"),
                             ("top", "max", "value")))
    operator = AggregateOperator(op=op, subtask=0, key_groups=range(0, 128),
                                 max_parallelism=128)
    per_key = 8 * 5 + 8  # key, group, count, sum, max (+ pickled int overhead)
    keys = max(1, size_bytes // per_key)
    step = 1_000_000
    for start in range(0, keys, step):
        values = np.arange(start, min(keys, start + step), dtype=np.int64)
        operator.process(Batch(arrow=pa.RecordBatch.from_arrays(
            [pa.array(values), pa.array(values)], names=["key", "value"])))
    return operator


# ---------------------------------------------------------------------- storage


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def moto_server() -> Iterator[Any]:
    """moto's S3 server on loopback; yields an S3Config pointing at it."""
    from cjob_checkpoint.storage.s3 import S3Config, build_s3_client

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    config = S3Config(endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1",
                      access_key_id="bench", secret_access_key="bench", read_timeout=300.0)
    try:
        deadline = time.monotonic() + 60
        client = build_s3_client(config)
        while True:
            try:
                client.create_bucket(Bucket="bench")
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.3)
        yield config
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _plain_write(*, kind: str, data: bytes, root: Path, s3: Any) -> float:
    """The baseline: the same bytes as one plain file write + fsync, or one put_object."""
    started = time.perf_counter()
    if kind == "file":
        path = root / "plain.bin"
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        elapsed = time.perf_counter() - started
        path.unlink()
        return elapsed
    from cjob_checkpoint.storage.s3 import shared_s3_client

    client = shared_s3_client(s3)
    client.put_object(Bucket="bench", Key="plain.bin", Body=data)
    elapsed = time.perf_counter() - started
    client.delete_object(Bucket="bench", Key="plain.bin")
    return elapsed


def measure_checkpoint(*, state: Any, storage: Any, checkpoint_id: int) -> dict[str, Any]:
    """One checkpoint of ``state``: sync snapshot, serialise, write; seconds per phase."""
    t0 = time.perf_counter()
    snapshot = state.snapshot()
    t1 = time.perf_counter()
    data = snapshot.serialize()
    t2 = time.perf_counter()
    handle = storage.write_state(checkpoint_id, "state", 0, data)
    t3 = time.perf_counter()
    return {"sync_s": t1 - t0, "serialize_s": t2 - t1, "write_s": t3 - t2,
            "total_s": t3 - t0, "bytes": handle.size_bytes, "data": data}


def _measure(*, kind: str, state_kind: str, size_mb: int, state: Any, repeat: int,
             root: Path, s3: Any) -> dict[str, Any]:
    from cjob_checkpoint.checkpoint_storage import CheckpointStorage
    from cjob_checkpoint.storage.factory import get_filesystem

    uri = (root / "checkpoints").as_uri() if kind == "file" else "s3://bench/checkpoints"
    storage = CheckpointStorage(uri, f"state-{state_kind}-{size_mb}",
                                fs=get_filesystem(uri, s3=s3))
    runs = []
    baselines = []
    for i in range(repeat):
        gc.collect()
        run = measure_checkpoint(state=state, storage=storage, checkpoint_id=i + 1)
        data = run.pop("data")
        baselines.append(_plain_write(kind=kind, data=data, root=root, s3=s3))
        del data
        runs.append(run)
        storage.fs.delete_prefix(storage.checkpoint_dir(i + 1))
    return {
        "storage": kind, "state": state_kind, "size_mb": size_mb,
        "bytes": runs[0]["bytes"],
        "sync_ms": median(r["sync_s"] for r in runs) * 1000.0,
        "serialize_s": median(r["serialize_s"] for r in runs),
        "write_s": median(r["write_s"] for r in runs),
        "total_s": median(r["total_s"] for r in runs),
        "baseline_write_s": median(baselines),
        "runs": runs,
    }


def run(ns: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in str(ns.sizes_mb).split(",") if s.strip()]
    root = fresh_dir("state-size")
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        s3 = None if ns.no_s3 else stack.enter_context(moto_server())
        for state_kind in ("hashmap", "aggregate"):
            for size_mb in sizes:
                if state_kind == "aggregate" and size_mb > ns.aggregate_max_mb:
                    continue
                print(f"[state-size] building {size_mb} MiB of {state_kind} state", flush=True)
                started = time.monotonic()
                if state_kind == "hashmap":
                    state = build_hashmap_state(size_bytes=size_mb * MIB,
                                                value_bytes=ns.value_bytes)
                else:
                    state = build_aggregate_state(size_bytes=size_mb * MIB)
                print(f"[state-size]   built in {time.monotonic() - started:.1f}s", flush=True)
                for kind in ("file", "s3"):
                    if kind == "s3" and (s3 is None or size_mb > ns.s3_max_mb):
                        continue
                    print(f"[state-size]   checkpoint to {kind}", flush=True)
                    result = _measure(kind=kind, state_kind=state_kind, size_mb=size_mb,
                                      state=state, repeat=ns.repeat, root=root, s3=s3)
                    results.append(result)
                    print(f"[state-size]   {result['total_s']:.2f}s "
                          f"({result['bytes'] / MIB:.0f} MiB)", flush=True)
                del state
                gc.collect()
    remove_dir(root)
    rows = [[r["state"], r["storage"], r["bytes"] / MIB, r["sync_ms"], r["serialize_s"],
             r["write_s"], r["total_s"], r["baseline_write_s"],
             r["total_s"] / r["baseline_write_s"]] for r in results]
    print_table(f"state size: one subtask, median of {ns.repeat} (seconds unless stated)",
                ["state", "storage", "MiB", "sync ms", "serialize", "write", "total",
                 "plain write", "ratio"], rows)
    largest = [r for r in results if r["state"] == "hashmap" and r["storage"] == "file"]
    gib = next((r for r in largest if r["size_mb"] >= 1024), None)
    value = gib["total_s"] if gib else None
    met = bool(gib and gib["total_s"] <= TARGET_SECONDS) if gib else None
    _plot(results)
    data = {
        "scale": {"sizes_mb": sizes, "s3_max_mb": ns.s3_max_mb,
                  "aggregate_max_mb": ns.aggregate_max_mb, "value_bytes": ns.value_bytes,
                  "repeat": ns.repeat, "level": "state backend, one subtask"},
        "results": results,
        "target": {"seconds_for_1_gib_to_file": TARGET_SECONDS, "met": met},
    }
    write_result("state-size", data)
    update_summary({
        "checkpoint_1gib_file_seconds": target_entry(
            value=value, target=TARGET_SECONDS,
            unit="s, full checkpoint of 1 GiB hashmap state to file storage (one subtask: "
                 "sync + serialize + write + fsync)",
            met=met, baseline=gib["baseline_write_s"] if gib else None,
            note="baseline: plain write + fsync of the same bytes" if gib
            else "1 GiB not in --sizes-mb"),
    })
    return data


def _plot(results: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        series.setdefault((r["state"], r["storage"]), []).append(r)
    for (state, storage), points in sorted(series.items()):
        ax.plot([p["bytes"] / MIB for p in points], [p["total_s"] for p in points], "o-",
                label=f"{state} -> {storage}")
        if state == "hashmap":
            ax.plot([p["bytes"] / MIB for p in points],
                    [p["baseline_write_s"] for p in points], "x:",
                    label=f"plain write -> {storage}")
    ax.axhline(TARGET_SECONDS, color="red", linestyle="--", label="target for 1 GiB")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("state size (MiB, serialized)")
    ax.set_ylabel("checkpoint duration (s)")
    ax.set_title("Checkpoint duration vs state size (one subtask)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(plot_path("state-size"))
    plt.close(fig)
