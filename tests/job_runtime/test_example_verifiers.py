"""The examples' verifiers must catch a lost and a duplicated record, or they prove nothing."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from runtime_harness import REPO, load_example

running_sum = load_example("examples/running_sum/verify.py")
word_count = load_example("examples/word_count/verify.py")


def running_sums(count: int, keys: int = 97) -> list[dict[str, int]]:
    totals: dict[int, int] = collections.defaultdict(int)
    out = []
    for seq in range(count):
        totals[seq % keys] += seq
        out.append({"key": seq % keys, "value": totals[seq % keys]})
    return out


def test_the_running_sum_verifier_accepts_exactly_once_output() -> None:
    assert running_sum.verify(running_sums(1000), count=1000) == []


def test_the_running_sum_verifier_finds_a_lost_record() -> None:
    records = running_sums(1000)
    del records[500]
    assert running_sum.verify(records, count=1000) != []


def test_the_running_sum_verifier_finds_a_replayed_record() -> None:
    # A replay after a bad restore: the state counted record 600 twice.
    records = running_sums(1000)
    key = records[600]["key"]
    later = [r for r in records[600:] if r["key"] == key]
    replayed = [dict(r, value=r["value"] + 600) for r in later[1:]]
    records = [r for r in records if r not in later[1:]] + replayed
    assert running_sum.verify(records, count=1000) != []


def word_counts(text: str) -> list[dict[str, Any]]:
    seen: collections.Counter[str] = collections.Counter()
    out = []
    for word in text.split():
        seen[word] += 1
        out.append({"word": word, "count": seen[word]})
    return out


def test_the_word_count_verifier_recounts_the_bundled_text() -> None:
    expected = word_count.count_words(REPO / "examples" / "word_count" / "data")
    assert expected["the"] > 50
    assert expected["keeper's"] == 2
    assert sum(expected.values()) > 700


def test_the_word_count_verifier_finds_lost_and_duplicated_words(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a b a\nc a\n")
    expected = word_count.count_words(tmp_path)
    good = word_counts("a b a c a")
    assert word_count.verify(good, expected) == []
    assert word_count.verify(good[:-1], expected) != []                  # lost
    assert word_count.verify([*good, good[0]], expected) != []           # duplicated
    assert word_count.verify([*good, {"word": "z", "count": 1}], expected) != []


clicks_per_minute = load_example("examples/clicks_per_minute/verify.py")
clicks_data = load_example("examples/clicks_per_minute/clicks.py")


def window_rows(frame: Any, *, size_ms: int) -> list[dict[str, Any]]:
    expected = clicks_per_minute.expected_windows(frame, size_ms=size_ms)
    return [{"user": user, "window_start": start, "window_end": start + size_ms, "n": n,
             "total": float(total)} for (user, start), (n, total) in expected.items()]


def test_the_clicks_per_minute_verifier_accepts_each_window_once_and_finds_every_fault() -> None:
    frame = clicks_per_minute.read(REPO / "examples" / "clicks_per_minute" / "data")
    assert len(frame) == 2400 and frame["ts"].dtype == "int64"
    good = window_rows(frame, size_ms=60_000)
    assert clicks_per_minute.verify(good, frame, size_ms=60_000) == []
    assert any("emitted 2 times" in p for p in
               clicks_per_minute.verify(good + good[:1], frame, size_ms=60_000))
    assert any("never emitted" in p for p in
               clicks_per_minute.verify(good[1:], frame, size_ms=60_000))
    counted_twice = [{**good[0], "n": good[0]["n"] + 1}, *good[1:]]
    assert any("expected" in p for p in
               clicks_per_minute.verify(counted_twice, frame, size_ms=60_000))


def test_the_clicks_per_minute_data_is_out_of_order_and_regenerated_alike(tmp_path: Path) -> None:
    clicks_data.write(tmp_path, clicks_data.clicks(2400), files=2)
    for name in ("clicks-000.jsonl", "clicks-001.jsonl"):
        bundled = REPO / "examples" / "clicks_per_minute" / "data" / name
        assert (tmp_path / name).read_text() == bundled.read_text()
    frame = clicks_per_minute.read(tmp_path)
    assert (frame["ts"].diff().dropna() < 0).any(), "the clicks must come out of order"


sessions = load_example("examples/sessions/verify.py")


def session_rows(frame: Any, *, gap_ms: int) -> list[dict[str, Any]]:
    expected = sessions.expected_sessions(frame, gap_ms=gap_ms)
    return [{"user": user, "window_start": start, "window_end": end, "n": n,
             "total": float(total), "session": number}
            for (user, start), (end, n, total, number) in expected.items()]


def test_the_sessions_reference_splits_where_the_gap_is_reached_not_before() -> None:
    import pandas as pd

    frame = pd.DataFrame({"user": ["a", "a", "a", "b", "a"],
                          "ts": [1_000, 30_999, 61_000, 5, 60_999], "amount": [1, 2, 4, 8, 16]})
    # a: 1 000 and 30 999 are less than 30 s apart; 60 999 is exactly 30 s after 30 999.
    assert sessions.expected_sessions(frame, gap_ms=30_000) == {
        ("a", 1_000): (60_999, 2, 3, 1), ("a", 60_999): (91_000, 2, 20, 2),
        ("b", 5): (30_005, 1, 8, 1)}


def test_the_sessions_verifier_accepts_each_session_once_and_finds_every_fault() -> None:
    frame = clicks_per_minute.read(REPO / "examples" / "clicks_per_minute" / "data")
    good = session_rows(frame, gap_ms=30_000)
    assert len(good) > 50, "the bundled clicks must have many sessions at a 30 s gap"
    assert sessions.verify(good, frame, gap_ms=30_000, numbered=True) == []
    assert any("emitted 2 times" in p for p in
               sessions.verify(good + good[:1], frame, gap_ms=30_000))
    assert any("never emitted" in p for p in sessions.verify(good[1:], frame, gap_ms=30_000))
    short = [{**good[0], "n": good[0]["n"] - 1}, *good[1:]]
    assert any("expected" in p for p in sessions.verify(short, frame, gap_ms=30_000))
    renumbered = [{**good[0], "session": good[0]["session"] + 1}, *good[1:]]
    assert sessions.verify(renumbered, frame, gap_ms=30_000) == []
    assert any("expected" in p for p in
               sessions.verify(renumbered, frame, gap_ms=30_000, numbered=True))
