"""The synchronous part of a checkpoint: how long a barrier blocks a task, old copy vs new.

Measured in this process on the runtime's own classes, one subtask, no Spark:
what a task does between taking a barrier and forwarding it, and what a
checkpoint interval's state writes cost, for three kinds of state.

* ``MapState``: one key whose map holds M entries, ``--puts`` puts per interval
  then a snapshot. New: ``MapState.put`` (the key's map is copied at most once per
  interval). Old: the put as it was before copy-on-write maps, done explicitly
  here: copy the key's whole map, change the copy, store it. Reported: the time a
  put costs and the interval's state time (puts + snapshot); the ratio is old/new.
* ``aggregate``: an operator holding N keys. New: ``AggregateOperator.snapshot()``
  (references and a flag). Old: the array copies the snapshot made before, done
  explicitly here on the same arrays. The copy the new way still needs moves to
  the first batch after the barrier; that batch's extra time over a steady batch
  is reported too, so nothing is hidden.
* ``files`` sink: an interval of B bytes of JSON lines. New:
  ``FilesSinkWriter.begin_snapshot()`` (closes the interval; the staging file is
  written later by the uploader thread, whose time is reported as ``background``).
  Old: the whole pre-commit at the barrier, ``FilesSinkWriter.snapshot()``, which is
  what the barrier ran before the pre-commit moved to the background.

Every case alternates old and new in the same run and reports medians of
``--repeat`` repetitions and their ratio (old/new: how many times shorter the
barrier got).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import fresh_dir, median, print_table, remove_dir, write_result
from job_runtime.operators.keyed import AggregateOperator, build_keyed_operator
from job_runtime.pipeline import KeyedOp, Pipeline
from job_runtime.records import Batch
from job_runtime.sinks import discard, files
from job_runtime.sinks.sink_contract import SinkContext, SinkSnapshot, SinkWriter
from job_runtime.sources import sequence
from job_runtime.state.handles import MapState, ProcessContext
from job_runtime.state.hashmap import HashMapStateBackend

MAX_P = 128
KEY_GROUP = 7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--map-sizes", default="1000,10000,100000",
                        help="entries of the MapState map, comma separated")
    parser.add_argument("--puts", type=int, default=1000, help="MapState puts per interval")
    parser.add_argument("--aggregate-keys", default="100000,1000000,10000000",
                        help="keys of the aggregate operator, comma separated")
    parser.add_argument("--sink-mb", default="1,10,100",
                        help="files sink output per interval in MB, comma separated")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each case")


def _sizes(text: str, kind: Callable[[str], Any] = int) -> list[Any]:
    return [kind(part) for part in text.split(",") if part.strip()]


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    """Milliseconds ``fn(*args)`` takes, with the collector out of the way."""
    gc.disable()
    try:
        started = time.perf_counter()
        fn(*args)
        return (time.perf_counter() - started) * 1000.0
    finally:
        gc.enable()


# ---------------------------------------------------------------------- MapState


def _map_state(size: int) -> tuple[HashMapStateBackend, MapState]:
    backend = HashMapStateBackend(key_groups=range(0, MAX_P))
    context = ProcessContext(backend=backend, operator="op")
    context.set_key("user", KEY_GROUP)
    state = context.map_state("m")
    for i in range(size):
        state.put(i, i)
    return backend, state


def _old_put(backend: HashMapStateBackend, user_key: Any, value: Any) -> None:
    """A put before copy-on-write maps: the key's whole map copied, changed, stored."""
    current = backend.get("op/m", KEY_GROUP, "user", {})
    updated = dict(current)
    updated[user_key] = value
    backend.put("op/m", KEY_GROUP, "user", updated)


def _old_puts(backend: HashMapStateBackend, puts: int) -> None:
    for i in range(puts):
        _old_put(backend, i, -i)


def _new_puts(state: MapState, puts: int) -> None:
    for i in range(puts):
        state.put(i, -i)


def map_state_case(*, size: int, puts: int, repeat: int) -> dict[str, Any]:
    old_puts: list[float] = []
    new_puts: list[float] = []
    old_sync: list[float] = []
    new_sync: list[float] = []
    for _ in range(repeat):
        old_backend, _ = _map_state(size)
        old_backend.snapshot()
        old_puts.append(_timed(_old_puts, old_backend, puts))
        old_sync.append(_timed(old_backend.snapshot))
        new_backend, state = _map_state(size)
        new_backend.snapshot()
        new_puts.append(_timed(_new_puts, state, puts))
        new_sync.append(_timed(new_backend.snapshot))
    old_interval = median(old_puts) + median(old_sync)
    new_interval = median(new_puts) + median(new_sync)
    return {"map_size": size, "puts": puts,
            "old_put_us": median(old_puts) * 1000.0 / puts,
            "new_put_us": median(new_puts) * 1000.0 / puts,
            "old_snapshot_ms": median(old_sync), "new_snapshot_ms": median(new_sync),
            "old_interval_ms": old_interval, "new_interval_ms": new_interval,
            "ratio": old_interval / new_interval if new_interval else float("nan")}


# ---------------------------------------------------------------------- aggregate


def _aggregate_op() -> KeyedOp:
    p = Pipeline(args={})
    (p.source(sequence(count=1)).key_by("k")
     .aggregate(n="count", total=("sum", "v"), high=("max", "v")).sink(discard()))
    return p.keyed_ops[0]


def _keys_batch(keys: np.ndarray) -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pydict({"k": keys, "v": np.ones(len(keys))}))


def _old_snapshot_copies(operator: AggregateOperator) -> Any:
    """The synchronous part before copy-on-write arrays: every array copied."""
    snapshot: Any = operator.snapshot()
    keys = snapshot.keys
    # Arrow keys are copied by concatenating them with nothing (a new buffer).
    copied = keys.copy() if isinstance(keys, np.ndarray) else \
        pa.concat_arrays([keys, keys.slice(0, 0)])
    return (copied, snapshot.groups.copy(),
            {name: values.copy() for name, values in snapshot.accumulators.items()})


def aggregate_case(*, keys: int, repeat: int) -> dict[str, Any]:
    operator = build_keyed_operator(op=_aggregate_op(), subtask=0, key_groups=range(0, MAX_P),
                                    max_parallelism=MAX_P)
    assert isinstance(operator, AggregateOperator)
    step = 1_000_000
    for start in range(0, keys, step):
        operator.process(_keys_batch(np.arange(start, min(keys, start + step))))
    probe = _keys_batch(np.random.default_rng(1).integers(0, keys, size=1000))
    old_sync: list[float] = []
    new_sync: list[float] = []
    first_batch: list[float] = []
    steady_batch: list[float] = []

    def old_snapshot() -> None:
        _old_snapshot_copies(operator)

    def one_batch() -> None:
        operator.process(probe)

    for _ in range(repeat):
        old_sync.append(_timed(old_snapshot))
        operator.process(probe)
        new_sync.append(_timed(operator.snapshot))
        first_batch.append(_timed(one_batch))
        steady_batch.append(_timed(one_batch))
    old, new = median(old_sync), median(new_sync)
    return {"keys": keys, "old_sync_ms": old, "new_sync_ms": new,
            "ratio": old / new if new else float("nan"),
            "deferred_copy_ms": median(first_batch) - median(steady_batch),
            "steady_batch_ms": median(steady_batch)}


# ---------------------------------------------------------------------- files sink


def _fill(writer: Any, mb: float) -> int:
    row = {"key": 12345, "value": 678.9, "name": "user-000000"}
    per_batch = 2000
    line = len(b'{"key":12345,"value":678.9,"name":"user-000000"}\n')
    batches = max(1, int(mb * 1e6 / (line * per_batch)))
    batch = Batch(rows=[row] * per_batch)
    for _ in range(batches):
        writer.write(batch)
    return batches * per_batch


def _begin(writer: SinkWriter, into: list[SinkSnapshot]) -> None:
    into.append(writer.begin_snapshot(2))


def sink_case(*, mb: float, repeat: int, work: Path) -> dict[str, Any]:
    old_sync: list[float] = []
    new_sync: list[float] = []
    background: list[float] = []
    for r in range(repeat):
        out = work / f"sink-{mb}-{r}"
        writer = files(str(out), format="jsonl").open(context=SinkContext(
            subtask=0, parallelism=1, attempt_tag="a1e1", job_id="bench-sync"))
        _fill(writer, mb)
        old_sync.append(_timed(writer.snapshot, 1))
        _fill(writer, mb)
        pre_commit: list[SinkSnapshot] = []
        new_sync.append(_timed(_begin, writer, pre_commit))
        background.append(_timed(pre_commit[0].complete))
        writer.close()
        remove_dir(out)
    old, new = median(old_sync), median(new_sync)
    return {"interval_mb": mb, "old_sync_ms": old, "new_sync_ms": new,
            "ratio": old / new if new else float("nan"),
            "background_ms": median(background)}


# ---------------------------------------------------------------------- run


def run(ns: argparse.Namespace) -> None:
    maps = [map_state_case(size=size, puts=ns.puts, repeat=ns.repeat)
            for size in _sizes(ns.map_sizes)]
    print_table("MapState: a checkpoint interval's state time (puts + snapshot), ms",
                ["map size", "puts", "old put us", "new put us", "old ms", "new ms",
                 "old/new"],
                [[m["map_size"], m["puts"], m["old_put_us"], m["new_put_us"],
                  m["old_interval_ms"], m["new_interval_ms"], m["ratio"]] for m in maps])
    aggregates = [aggregate_case(keys=keys, repeat=ns.repeat)
                  for keys in _sizes(ns.aggregate_keys)]
    print_table("aggregate: synchronous part of a snapshot, ms",
                ["keys", "old ms", "new ms", "old/new", "copy after, ms", "batch ms"],
                [[a["keys"], a["old_sync_ms"], a["new_sync_ms"], a["ratio"],
                  a["deferred_copy_ms"], a["steady_batch_ms"]] for a in aggregates])
    work = fresh_dir("sync-part")
    try:
        sinks = [sink_case(mb=mb, repeat=ns.repeat, work=work)
                 for mb in _sizes(ns.sink_mb, float)]
    finally:
        remove_dir(work)
    print_table("files sink: the barrier's part of the pre-commit, ms",
                ["interval MB", "old ms", "new ms", "old/new", "background ms"],
                [[s["interval_mb"], s["old_sync_ms"], s["new_sync_ms"], s["ratio"],
                  s["background_ms"]] for s in sinks])
    write_result("sync-part", {"repeat": ns.repeat, "map_state": maps,
                               "aggregate": aggregates, "files_sink": sinks})
