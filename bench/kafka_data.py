"""The kafka benchmark's data: click events in, per-user counts out, and what is checked.

Input records are JSON click events ``{"user": "u<k>", "page": "/p<m>", "ts": <ms>}``
keyed by the user, ``ts`` the producer's wall clock when it produced the record. Users
are Zipf-distributed (user ``u0`` clicks most; weight ``1 / (k + 1) ** skew``), as
real traffic is. Output records, ours and Structured Streaming's alike, are
``{"user", "n", "last_ts"}``: the user's count so far and the newest ``ts`` among
its records, which is what lets the latency be read off the output.

Pure functions (:func:`check_exactly_once`, :func:`check_final_counts`,
:func:`record_latencies`) are separated from the clients so they can be tested
without a broker.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

PAGES = 50


@dataclasses.dataclass(frozen=True, kw_only=True)
class Output:
    """One output record as a read_committed consumer got it."""

    user: str
    n: int
    last_ts: int
    seen_at: float = 0.0
    """Wall clock (epoch seconds) when the consumer received it; 0 when not watched."""


@dataclasses.dataclass(kw_only=True)
class Produced:
    """What was produced to an input topic: per user, the count and the newest ``ts``;
    for a latency run also every record's (user, ts)."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    last_ts: dict[str, int] = dataclasses.field(default_factory=dict)
    records: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, user: str, ts: int, *, keep: bool) -> None:
        self.counts[user] = self.counts.get(user, 0) + 1
        if ts > self.last_ts.get(user, -1):
            self.last_ts[user] = ts
        if keep:
            self.records.append((user, ts))


def zipf_users(count: int, *, users: int, skew: float = 1.0, seed: int = 7) -> np.ndarray:
    """``count`` user indices in ``[0, users)``, user ``k`` with weight ``1/(k+1)**skew``."""
    weights = 1.0 / np.arange(1, users + 1, dtype=np.float64) ** skew
    rng = np.random.default_rng(seed)
    chosen: np.ndarray = rng.choice(users, size=count, p=weights / weights.sum())
    return chosen


def event(user: str, page: int, ts: int) -> bytes:
    return b'{"user":"%s","page":"/p%d","ts":%d}' % (user.encode(), page, ts)


def _producer(bootstrap: str, **settings: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, **settings})


def _produce(producer: Any, topic: str, user: str, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, key=user.encode(), value=value)
            return
        except BufferError:  # the local queue is full: let deliveries make room
            producer.poll(0.05)


def produce_all(*, bootstrap: str, topic: str, count: int, users: int, seed: int = 7) -> Produced:
    """Produce ``count`` events as fast as the broker takes them; wait for every ack."""
    chosen = zipf_users(count, users=users, seed=seed)
    pages = np.random.default_rng(seed + 1).integers(0, PAGES, size=count)
    names = [f"u{k}" for k in range(users)]
    producer = _producer(bootstrap, **{"linger.ms": 50, "batch.size": 1 << 20,
                                       "queue.buffering.max.messages": 500_000})
    produced = Produced()
    started = time.monotonic()
    ts = int(time.time() * 1000)
    for i, (k, page) in enumerate(zip(chosen.tolist(), pages.tolist(), strict=True)):
        if i % 1000 == 0:
            ts = int(time.time() * 1000)
            producer.poll(0)
        user = names[k]
        _produce(producer, topic, user, event(user, page, ts))
        produced.add(user, ts, keep=False)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records were not acknowledged within 120 s")
    produced.seconds = time.monotonic() - started
    return produced


def produce_at_rate(*, bootstrap: str, topic: str, rate: float, seconds: float, warmup: float,
                    users: int, seed: int = 11, stop: threading.Event | None = None
                    ) -> Produced:
    """Produce ``rate`` events a second for ``warmup + seconds``, each with its own
    produce time as ``ts``. Records of the first ``warmup`` seconds are counted but not
    kept for the latency (``records`` holds only the later ones)."""
    total = int(rate * (warmup + seconds))
    chosen = zipf_users(total, users=users, seed=seed).tolist()
    pages = np.random.default_rng(seed + 1).integers(0, PAGES, size=total).tolist()
    names = [f"u{k}" for k in range(users)]
    producer = _producer(bootstrap, **{"linger.ms": 5})
    produced = Produced()
    started = time.monotonic()
    tick = 0.01
    sent = 0
    while sent < total and not (stop is not None and stop.is_set()):
        elapsed = time.monotonic() - started
        due = min(total, int(elapsed * rate) + 1)
        while sent < due:
            user = names[chosen[sent]]
            ts = int(time.time() * 1000)
            _produce(producer, topic, user, event(user, pages[sent], ts))
            produced.add(user, ts, keep=elapsed >= warmup)
            sent += 1
        producer.poll(0)
        time.sleep(tick)
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} records were not acknowledged within 60 s")
    produced.seconds = time.monotonic() - started
    return produced


def parse_output(value: bytes | None, *, seen_at: float = 0.0) -> Output | None:
    try:
        data = json.loads(value or b"")
        return Output(user=str(data["user"]), n=int(data["n"]), last_ts=int(data["last_ts"]),
                      seen_at=seen_at)
    except (ValueError, KeyError, TypeError):
        return None


class OutputWatcher:
    """A read_committed consumer of an output topic, from its beginning, in a thread;
    every output record with the time it arrived."""

    def __init__(self, *, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.outputs: list[Output] = []
        self.unreadable = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="output-watcher")
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap,
                             "group.id": f"bench-watch-{uuid.uuid4().hex[:12]}",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "fetch.wait.max.ms": 10})
        try:
            described = consumer.list_topics(topic=self.topic, timeout=30).topics[self.topic]
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                             for p in sorted(described.partitions)])
            while not self._stop.is_set():
                messages = consumer.consume(num_messages=10_000, timeout=0.05)
                seen_at = time.time()
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(f"reading {self.topic}: {error}")
                        continue
                    output = parse_output(message.value(), seen_at=seen_at)
                    if output is None:
                        self.unreadable += 1
                    else:
                        self.outputs.append(output)
        except BaseException as exc:  # reported by stop()
            self._error = exc
        finally:
            consumer.close()

    def stop(self) -> list[Output]:
        self._stop.set()
        self._thread.join(timeout=30)
        if self._error is not None:
            raise RuntimeError(f"watching {self.topic}: {self._error}")
        return list(self.outputs)


def read_outputs(*, bootstrap: str, topic: str, timeout: float = 120.0) -> tuple[list[Output], int]:
    """Every output record a read_committed consumer sees now, by partition and offset,
    and the number of values that were not output records."""
    from e2e.kafka.clients import read_topic

    records = read_topic(bootstrap=bootstrap, topic=topic, isolation_level="read_committed",
                         timeout=timeout)
    outputs = [parse_output(r.value) for r in records]
    return [o for o in outputs if o is not None], sum(1 for o in outputs if o is None)


# ---------------------------------------------------------------------- pure checks


def _by_user(outputs: Iterable[Output]) -> dict[str, list[Output]]:
    grouped: dict[str, list[Output]] = defaultdict(list)
    for output in outputs:
        grouped[output.user].append(output)
    return grouped


def check_exactly_once(produced: Produced, outputs: Sequence[Output], *,
                       limit: int = 20) -> list[str]:
    """The problems of an exactly-once run of a per-user count, in output order.

    The output emits a user's count and newest ``ts`` once per flush, not once per
    record, so the counts of a user are not 1..n but a strictly increasing sequence
    that ends at n: a count repeated or going back is an update delivered twice (a
    replayed interval), a last count short of n an update lost, a last ``last_ts``
    other than the user's newest ``ts`` a wrong aggregate. Users without output, and
    output for users never produced, are problems too.
    """
    problems: list[str] = []
    grouped = _by_user(outputs)
    for user in sorted(set(produced.counts) | set(grouped)):
        got = grouped.get(user, [])
        expected = produced.counts.get(user, 0)
        counts = [o.n for o in got]
        if not got:
            problems.append(f"user {user}: no output for {expected} records")
        elif any(b <= a for a, b in itertools.pairwise(counts)):
            repeated = len(counts) - len(set(counts))
            problems.append(f"user {user}: counts not strictly increasing "
                            f"({repeated} repeated, {len(counts)} updates)")
        elif counts[-1] != expected:
            problems.append(f"user {user}: last count {counts[-1]}, {expected} records")
        elif got[-1].last_ts != produced.last_ts.get(user):
            problems.append(f"user {user}: last_ts {got[-1].last_ts}, newest ts "
                            f"{produced.last_ts.get(user)}")
        if len(problems) >= limit:
            problems.append("...")
            break
    return problems


def check_final_counts(produced: Produced, outputs: Sequence[Output], *,
                       limit: int = 20) -> tuple[list[str], int]:
    """For an at-least-once output: whether each user's highest count is its number of
    records, and how many updates were delivered more than once (same user and count)."""
    problems: list[str] = []
    grouped = _by_user(outputs)
    duplicates = 0
    for user in sorted(set(produced.counts) | set(grouped)):
        counts = [o.n for o in grouped.get(user, [])]
        duplicates += len(counts) - len(set(counts))
        expected = produced.counts.get(user, 0)
        if max(counts, default=0) != expected and len(problems) < limit:
            problems.append(f"user {user}: highest count {max(counts, default=0)}, "
                            f"{expected} records")
    return problems, duplicates


def record_latencies(records: Sequence[tuple[str, int]], outputs: Sequence[Output]
                     ) -> tuple[list[float], int]:
    """Per input record ``(user, ts)``: seconds from ``ts`` until a consumer first saw an
    output of that user whose ``last_ts`` is at or after it (the first output that
    counts the record). Returns the latencies and the number of records no output
    covered."""
    covering: dict[str, tuple[list[int], list[float]]] = {}
    for user, got in _by_user(outputs).items():
        ordered = sorted(got, key=lambda o: o.last_ts)
        stamps = [o.last_ts for o in ordered]
        earliest = [o.seen_at for o in ordered]
        for i in range(len(earliest) - 2, -1, -1):  # earliest sighting at or after each
            earliest[i] = min(earliest[i], earliest[i + 1])
        covering[user] = (stamps, earliest)
    latencies: list[float] = []
    missing = 0
    for user, ts in records:
        found = covering.get(user)
        index = bisect.bisect_left(found[0], ts) if found else 0
        if found is None or index == len(found[0]):
            missing += 1
            continue
        latencies.append(found[1][index] - ts / 1000.0)
    return latencies, missing


def covered(records: Sequence[tuple[str, int]], outputs: Sequence[Output]) -> bool:
    """Whether every record has an output that counts it (the drain is over)."""
    newest: dict[str, int] = {}
    for output in outputs:
        newest[output.user] = max(newest.get(output.user, -1), output.last_ts)
    last: dict[str, int] = {}
    for user, ts in records:
        last[user] = max(last.get(user, -1), ts)
    return all(newest.get(user, -1) >= ts for user, ts in last.items())


def summarize(counts: Mapping[str, int]) -> dict[str, int]:
    """Users, records and the busiest user's share, for the results file."""
    ordered = sorted(counts.values(), reverse=True)
    return {"users": len(ordered), "records": sum(ordered),
            "top_user_records": ordered[0] if ordered else 0}
