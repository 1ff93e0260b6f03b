"""The windows benchmark's data, its reference result, and how an output is checked and timed.

Input: Parquet files ``part-<n>.parquet`` of ``user`` (string ``"u<k>"``, Zipf-distributed
over ``keys`` users: user ``k`` with weight ``1 / (k + 1) ** skew``), ``amount`` (int64,
1..1000) and ``ts`` (int64, event time in epoch milliseconds). Record ``i`` of the whole
input has the event time ``BASE_MS + i * 1000 // events_per_second - delay``, ``delay``
uniform in ``[0, disorder_ms]``: time advances with the record index and every record
is up to ``disorder_ms`` older than its place in the stream, so the stream is out of
order by at most ``disorder_ms`` (a watermark delay above it leaves no record late).
Each file is generated from its own seed (``seed``, file index), so the input is the
same on every run and is written one file at a time.

Output rows, ours and Structured Streaming's alike: ``user``, ``window_start``,
``window_end`` (epoch ms), ``n`` (count), ``total`` (sum of ``amount``) and ``fired_at``
(epoch ms: when the engine emitted the row, see :mod:`bench.windows`).

The functions here are pure or touch only local files, so they are tested without
either engine.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

BASE_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: the event time of record 0 (before its delay)."""
WINDOW_MS = 60_000
"""The tumbling window: one minute."""
END_USER = "__end__"
"""The user of Structured Streaming's end-of-input record (see :func:`write_end_marker`)."""
END_MARKER_AHEAD_MS = 3_600_000
"""How far past the input's newest event time the end-of-input record lies."""
UNKNOWN_USER = -1
OUTPUT_COLUMNS = ("user", "window_start", "window_end", "n", "total", "fired_at")
SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("ts", pa.int64())])


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSpec:
    records: int
    keys: int
    file_records: int
    events_per_second: int = 1000
    disorder_ms: int = 3000
    skew: float = 1.0
    seed: int = 7

    def __post_init__(self) -> None:
        if min(self.records, self.keys, self.file_records, self.events_per_second) < 1 \
                or self.disorder_ms < 0:
            raise ValueError("records, keys, file_records and events_per_second must be "
                             "positive, disorder_ms not negative")

    @property
    def files(self) -> int:
        return -(-self.records // self.file_records)

    @property
    def file_span_ms(self) -> int:
        """Event time one file covers."""
        return self.file_records * 1000 // self.events_per_second


def file_name(index: int) -> str:
    return f"part-{index:06d}.parquet"


@functools.lru_cache(maxsize=4)
def _user_names(keys: int) -> pa.Array:
    return pa.array([f"u{k}" for k in range(keys)], type=pa.string())


@functools.lru_cache(maxsize=4)
def _zipf_weights(keys: int, skew: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** skew
    normalised: np.ndarray = weights / weights.sum()
    return normalised


def file_table(spec: DataSpec, index: int) -> pa.Table:
    """File ``index`` of the input: records ``index * file_records`` onwards."""
    start = index * spec.file_records
    stop = min(spec.records, start + spec.file_records)
    if not 0 <= start < stop:
        raise IndexError(f"file {index} of {spec.files}")
    count = stop - start
    rng = np.random.default_rng([spec.seed, index])
    users = rng.choice(spec.keys, size=count, p=_zipf_weights(spec.keys, spec.skew))
    amount = rng.integers(1, 1001, size=count, dtype=np.int64)
    delay = rng.integers(0, spec.disorder_ms + 1, size=count, dtype=np.int64)
    position = np.arange(start, stop, dtype=np.int64)
    ts = BASE_MS + position * 1000 // spec.events_per_second - delay
    return pa.table([pc.take(_user_names(spec.keys), pa.array(users)), pa.array(amount),
                     pa.array(ts)], schema=SCHEMA)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Generated:
    paths: tuple[Path, ...]
    bytes: int
    max_ts: int
    seconds: float


def generate(directory: Path, spec: DataSpec) -> Generated:
    """Write the input into ``directory``, one file at a time.

    Each file's modification time is set one second after the previous one's:
    Structured Streaming's file source takes new files in modification-time order (with
    millisecond resolution, ties in listing order), and files written within the same
    millisecond could otherwise be read out of order.
    """
    started = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    first_mtime = int(time.time()) - spec.files - 60
    paths = []
    size = 0
    max_ts = BASE_MS
    for index in range(spec.files):
        table = file_table(spec, index)
        max_ts = max(max_ts, int(pc.max(table["ts"]).as_py()))
        path = directory / file_name(index)
        pq.write_table(table, path)
        mtime = first_mtime + index
        os.utime(path, (mtime, mtime))
        size += path.stat().st_size
        paths.append(path)
    return Generated(paths=tuple(paths), bytes=size, max_ts=max_ts,
                     seconds=time.monotonic() - started)


def link_input(directory: Path, generated: Generated) -> Path:
    """Structured Streaming's input folder: hard links to the same files, plus the
    end-of-input record (:func:`write_end_marker`)."""
    directory.mkdir(parents=True)
    for path in generated.paths:
        os.link(path, directory / path.name)
    write_end_marker(directory, generated=generated)
    return directory


def write_end_marker(directory: Path, *, generated: Generated) -> Path:
    """One record of :data:`END_USER` an hour of event time past the input's end, in the
    last file by modification time and name.

    Structured Streaming has no end of input: its watermark moves only with new
    records, so the last minutes of windows would never be emitted. This record moves
    it past every window of the input, as our bounded source's final watermark does;
    its own window never fires (nothing comes after it), so it adds no output row.
    """
    table = pa.table([pa.array([END_USER]), pa.array([0], type=pa.int64()),
                      pa.array([generated.max_ts + END_MARKER_AHEAD_MS], type=pa.int64())],
                     schema=SCHEMA)
    path = directory / "zz-end.parquet"
    pq.write_table(table, path)
    latest = max(p.stat().st_mtime for p in generated.paths)
    os.utime(path, (latest + 1, latest + 1))
    return path


# ---------------------------------------------------------------------- reference


def user_ids(users: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``"u<k>"`` as ``k``; anything else as :data:`UNKNOWN_USER`."""
    valid = pc.fill_null(pc.match_substring_regex(users, r"^u[0-9]{1,18}$"), False)
    digits = pc.if_else(valid, pc.utf8_slice_codeunits(users, 1), "-1")
    ids: np.ndarray = np.asarray(pc.cast(digits, pa.int64()).to_numpy(zero_copy_only=False),
                                 dtype=np.int64)
    return ids


def window_start(ts: np.ndarray) -> np.ndarray:
    starts: np.ndarray = ts - np.mod(ts, WINDOW_MS)
    return starts


def reference(paths: Iterable[Path]) -> pd.DataFrame:
    """Count and sum of ``amount`` per user and minute, computed with pandas from the
    files (``user`` as its number, so 100,000 users stay integers)."""
    partials = []
    for path in paths:
        table = pq.read_table(path, columns=["user", "amount", "ts"])
        ts = table["ts"].to_numpy()
        frame = pd.DataFrame({"user": user_ids(table["user"]), "window_start": window_start(ts),
                              "amount": table["amount"].to_numpy()})
        partials.append(frame.groupby(["user", "window_start"], sort=False)
                        .agg(n=("amount", "size"), total=("amount", "sum")))
    if not partials:
        return pd.DataFrame({c: pd.Series(dtype=np.int64)
                             for c in ("user", "window_start", "n", "total")})
    combined = pd.concat(partials).groupby(level=[0, 1], sort=True).sum()
    return combined.reset_index().astype(np.int64)


def read_output(paths: Iterable[Path], *, visible_at: Mapping[Path, float] | None = None
                ) -> pd.DataFrame:
    """The output rows of ``paths`` with ``user`` as its number and, per row, when its file
    was first seen committed (``visible_at``, epoch seconds; NaN when not seen)."""
    frames = []
    for path in paths:
        table = pq.read_table(path)
        missing = [c for c in OUTPUT_COLUMNS if c not in table.schema.names]
        if missing:
            raise ValueError(f"{path.name}: no column {', '.join(missing)} (it has "
                             f"{', '.join(table.schema.names)})")
        frame = pd.DataFrame({"user": user_ids(table["user"]),
                              **{c: _numbers(table[c]) for c in OUTPUT_COLUMNS[1:]}})
        seen = (visible_at or {}).get(path)
        frame["visible_at"] = np.nan if seen is None else seen
        frames.append(frame)
    if not frames:
        return pd.DataFrame({**{c: pd.Series(dtype=np.int64) for c in OUTPUT_COLUMNS},
                             "visible_at": pd.Series(dtype=np.float64)})
    return pd.concat(frames, ignore_index=True)


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """Integers as int64; a sum that an engine returns as a float stays a float, so that
    a fraction or a rounded large value shows as a wrong sum instead of being cut off."""
    values = np.asarray(column.to_numpy())
    if np.issubdtype(values.dtype, np.floating):
        return values.astype(np.float64, copy=False)
    return values.astype(np.int64, copy=False)


def _examples(frame: pd.DataFrame, limit: int = 3) -> str:
    rows = frame.head(limit)
    return ", ".join(f"u{int(r.user)} at {int(r.window_start)}" for r in rows.itertuples())


def check_windows(expected: pd.DataFrame, output: pd.DataFrame) -> list[str]:
    """What is wrong with ``output`` against the reference: rows of unknown users, wrong
    window ends, windows emitted more than once, missing or extra windows, wrong counts
    or sums. Empty when the output is exactly the reference."""
    problems = []
    unknown = output[output["user"] == UNKNOWN_USER]
    if len(unknown):
        problems.append(f"{len(unknown):,} rows of a user that is not in the input")
    output = output[output["user"] != UNKNOWN_USER]
    bad_end = output[output["window_end"] != output["window_start"] + WINDOW_MS]
    if len(bad_end):
        problems.append(f"{len(bad_end):,} rows whose window_end is not window_start + "
                        f"{WINDOW_MS} ms ({_examples(bad_end)})")
    keys = ["user", "window_start"]
    repeated = output[output.duplicated(keys, keep="first")]
    if len(repeated):
        problems.append(f"{len(repeated):,} windows emitted more than once "
                        f"({_examples(repeated)})")
    once = output.drop_duplicates(keys, keep="first")
    merged = expected.merge(once[[*keys, "n", "total"]], on=keys, how="outer",
                            suffixes=("", "_out"), indicator=True)
    missing = merged[merged["_merge"] == "left_only"]
    if len(missing):
        problems.append(f"{len(missing):,} of {len(expected):,} windows missing "
                        f"({_examples(missing)})")
    extra = merged[merged["_merge"] == "right_only"]
    if len(extra):
        problems.append(f"{len(extra):,} windows that the input has no record of "
                        f"({_examples(extra)})")
    both = merged[merged["_merge"] == "both"]
    wrong = both[(both["n"] != both["n_out"]) | (both["total"] != both["total_out"])]
    if len(wrong):
        first = wrong.iloc[0]
        problems.append(f"{len(wrong):,} windows with a wrong count or sum (u{int(first.user)} "
                        f"at {int(first.window_start)}: {int(first.n_out)} records summing "
                        f"{first.total_out}, expected {int(first.n)} and "
                        f"{int(first.total)})")
    return problems


# ---------------------------------------------------------------------- latency


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowLatencies:
    seconds: tuple[float, ...]
    """Per measured window: its last row visible minus its first row fired."""
    windows: int
    """Windows in the output."""
    after_cut: int
    """Windows left out: their end is too close to the input's end for the stream's own
    watermark to pass it (the end of input fired them)."""
    unseen: int
    """Windows left out: a row's file was not seen appearing while the run lasted."""


def measured_cut(spec: DataSpec, *, max_ts: int, watermark_delay_ms: int) -> int:
    """The latest window end whose latency is measured.

    The input's own records move the watermark up to ``max_ts - delay``; ours holds
    it at the slower of its two source subtasks, each a file behind the other at most,
    so windows ending within a window and two files' span of that are left out: the
    end of input (our final watermark, Structured Streaming's end record) fires them.
    """
    return max_ts - watermark_delay_ms - WINDOW_MS - 2 * spec.file_span_ms


def window_latencies(output: pd.DataFrame, *, cut_ms: int) -> WindowLatencies:
    """Per window (all users' rows of one ``window_start``): from the first row's
    ``fired_at`` to the moment the last row's file was first seen committed."""
    if output.empty:
        return WindowLatencies(seconds=(), windows=0, after_cut=0, unseen=0)
    per_window = output.groupby("window_start").agg(
        fired=("fired_at", "min"), visible=("visible_at", "max"),
        unseen=("visible_at", lambda v: bool(v.isna().any())))
    kept = per_window[per_window.index + WINDOW_MS <= cut_ms]
    seen = kept[~kept["unseen"]]
    latencies = (seen["visible"] - seen["fired"] / 1000.0).sort_index()
    return WindowLatencies(seconds=tuple(float(v) for v in latencies),
                           windows=len(per_window), after_cut=len(per_window) - len(kept),
                           unseen=len(kept) - len(seen))


# ---------------------------------------------------------------------- committed output


OUR_PART = re.compile(r"^part-.*\.parquet$")
SPARK_LOG = re.compile(r"^\d+(\.compact)?$")
SPARK_METADATA = "_spark_metadata"


def spark_log_entries(text: str) -> list[tuple[str, str]]:
    """``(path, action)`` of one file of Structured Streaming's file sink log
    (``_spark_metadata/<batch>``: a version line, then one JSON entry per line)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError(f"not a file sink log: {text[:40]!r}")
    entries = []
    for line in lines[1:]:
        if line.strip():
            entry = json.loads(line)
            entries.append((str(entry["path"]), str(entry.get("action", "add"))))
    return entries


def local_path(uri: str) -> Path:
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"not a local file: {uri}")
    return Path(urllib.parse.unquote(parsed.path))


def _log_order(name: str) -> int:
    return int(name.split(".", 1)[0])


def spark_committed(output: Path) -> list[Path]:
    """The files Structured Streaming's file sink committed to ``output``: those its log
    adds (and does not delete), in log order. Files of a batch that did not commit are
    not in the log, and a reader of the sink does not see them either."""
    log = output / SPARK_METADATA
    names = sorted((n for n in os.listdir(log) if SPARK_LOG.match(n)), key=_log_order)
    committed: dict[Path, None] = {}
    for name in names:
        for uri, action in spark_log_entries((log / name).read_text()):
            path = local_path(uri)
            if action == "delete":
                committed.pop(path, None)
            else:
                committed.setdefault(path, None)
    return list(committed)


def ours_committed(output: Path) -> list[Path]:
    """Our files sink's committed files: ``part-*`` at the top (staging is under
    ``_pending/``)."""
    return sorted(output / n for n in os.listdir(output) if OUR_PART.match(n))


class OutputWatcher:
    """Notes when each output file first becomes visible to a reader, polling every
    ``interval`` seconds in a thread: ours, a committed ``part-*`` file appearing (the
    commit renames it into place); Structured Streaming, the sink log entry that
    adds the file appearing (written atomically when the batch commits its output)."""

    def __init__(self, output: Path, *, kind: str, interval: float = 0.05) -> None:
        if kind not in ("ours", "spark"):
            raise ValueError(f"kind must be ours or spark, got {kind!r}")
        self.output = output
        self.kind = kind
        self.interval = interval
        self.seen: dict[Path, float] = {}
        self._logs: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="output-watcher", daemon=True)

    def start(self) -> OutputWatcher:
        self._thread.start()
        return self

    def stop(self) -> dict[Path, float]:
        """Stop polling, after one last poll (files that appeared since the previous
        one, at most ``interval`` ago); the files seen and when each was first seen."""
        self._stop.set()
        self._thread.join()
        self.poll(time.time())
        return dict(self.seen)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll(time.time())
            self._stop.wait(self.interval)

    def poll(self, now: float) -> None:
        try:
            if self.kind == "ours":
                for name in os.listdir(self.output):
                    if OUR_PART.match(name):
                        self.seen.setdefault(self.output / name, now)
                return
            log = self.output / SPARK_METADATA
            for name in sorted((n for n in os.listdir(log) if SPARK_LOG.match(n)),
                               key=_log_order):
                if name in self._logs:
                    continue
                entries = spark_log_entries((log / name).read_text())
                self._logs.add(name)
                for uri, action in entries:
                    if action != "delete":
                        self.seen.setdefault(local_path(uri), now)
        except (FileNotFoundError, ValueError):
            return  # not created yet, or a log file caught half-written: the next poll
