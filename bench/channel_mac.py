"""What tagging every channel frame costs: channel throughput with and without frame tags.

A sender thread encodes batches and sends them as frames over a loopback TCP
connection; a receiver thread reads the frames and decodes the batches, as a
channel does (without credits, which would measure the scheduler instead).
Tagged and untagged repetitions alternate in one run; the result is the median
of each and their ratio. Two kinds of batch: row batches (pickled, what record
functions produce) and Arrow batches (Arrow IPC, what batch functions produce).
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from collections.abc import Callable

import pyarrow as pa

from bench.common import median, print_table, write_result
from job_runtime.network.framing import decode_batch, encode_batch, recv_frame, send_frame
from job_runtime.network.handshake import FrameMac, new_key
from job_runtime.records import Batch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of each mode")
    parser.add_argument("--batches", type=int, default=400, help="batches per repetition")
    parser.add_argument("--rows", type=int, default=1000, help="rows per batch")


def _batches(kind: str, rows: int) -> Batch:
    records = [{"key": i % 97, "value": i, "name": f"user-{i % 1000}"} for i in range(rows)]
    if kind == "rows":
        return Batch(rows=records)
    return Batch(arrow=pa.RecordBatch.from_pylist(records))


def _one_pass(batch: Batch, count: int, *, tagged: bool) -> tuple[float, int]:
    """Seconds to move ``count`` batches through one connection, and the bytes moved."""
    key = new_key()
    listener = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(listener.getsockname()[:2])
    receiver, _ = listener.accept()
    listener.close()
    for sock in (sender, receiver):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    send_mac = FrameMac(key=key) if tagged else None
    recv_mac = FrameMac(key=key) if tagged else None
    moved = [0]

    def receive() -> None:
        for _ in range(count):
            kind, _, payload = recv_frame(receiver, mac=recv_mac)
            decode_batch(kind, payload)
            moved[0] += len(payload)

    thread = threading.Thread(target=receive)
    started = time.perf_counter()
    thread.start()
    for _ in range(count):
        kind, payload = encode_batch(batch)
        send_frame(sender, kind, 0, payload, mac=send_mac)
    thread.join()
    elapsed = time.perf_counter() - started
    sender.close()
    receiver.close()
    return elapsed, moved[0]


def measure(*, kind: str, rows: int, batches: int, repeat: int) -> dict[str, float]:
    batch = _batches(kind, rows)
    times: dict[bool, list[float]] = {False: [], True: []}
    size = 0
    _one_pass(batch, max(10, batches // 10), tagged=True)  # warm up
    for _ in range(repeat):
        for tagged in (False, True):
            elapsed, size = _one_pass(batch, batches, tagged=tagged)
            times[tagged].append(elapsed)
    plain, tagged_s = median(times[False]), median(times[True])
    mb = size / 1e6
    return {"frame_bytes": size / batches, "untagged_mb_s": mb / plain,
            "tagged_mb_s": mb / tagged_s, "throughput_ratio": plain / tagged_s}


def run(ns: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    for kind in ("rows", "arrow"):
        results[kind] = measure(kind=kind, rows=ns.rows, batches=ns.batches, repeat=ns.repeat)
    cell: Callable[[float], str] = lambda v: f"{v:.1f}"  # noqa: E731
    print_table("channel throughput, tagged vs untagged frames",
                      ["batch", "frame KB", "untagged MB/s", "tagged MB/s", "ratio"],
                      [[kind, cell(r["frame_bytes"] / 1000), cell(r["untagged_mb_s"]),
                        cell(r["tagged_mb_s"]), f"{r['throughput_ratio']:.3f}"]
                       for kind, r in results.items()])
    write_result("channel-mac", {"rows_per_batch": ns.rows, "batches": ns.batches,
                                 "repeat": ns.repeat, "results": results})
