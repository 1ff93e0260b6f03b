"""The key index's lookups of identities, one contract for both: the compiled hash table
and the sorted arrays it falls back to find the same slot for every identity."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from job_runtime.operators.key_lookups import HashedLookup, SortedLookup, searched_lookup

Lookup = HashedLookup | SortedLookup


def hashed() -> Lookup:
    lookup = searched_lookup()
    assert isinstance(lookup, HashedLookup), "pandas provides the compiled hash table"
    return lookup


LOOKUPS: dict[str, Callable[[], Lookup]] = {"hashed": hashed, "sorted": SortedLookup}


@pytest.fixture(params=sorted(LOOKUPS))
def make(request: pytest.FixtureRequest) -> Callable[[], Lookup]:
    return LOOKUPS[request.param]


def identities(rng: np.random.Generator, count: int) -> np.ndarray:
    """Distinct 64-bit identities over the whole range, the top bit set in half of them."""
    return np.unique(rng.integers(0, 2**64, size=count, dtype=np.uint64, endpoint=False))


class TestFindingSlots:
    def test_an_empty_lookup_finds_nothing(self, make: Callable[[], Lookup]) -> None:
        lookup = make()
        assert len(lookup) == 0
        assert lookup.find(np.array([0, 2**63, 2**64 - 1], dtype=np.uint64)).tolist() == [-1] * 3

    def test_every_identity_added_over_several_rounds_finds_its_slot(
        self, make: Callable[[], Lookup]
    ) -> None:
        rng = np.random.default_rng(3)
        ids = identities(rng, 50_000)
        rng.shuffle(ids)
        slots = np.arange(len(ids), dtype=np.int64)
        lookup = make()
        for start in range(0, len(ids), 7_000):
            lookup.add(ids[start:start + 7_000], slots[start:start + 7_000])
        assert len(lookup) == len(ids)
        probe = np.concatenate([ids, identities(np.random.default_rng(4), 1_000)])
        found = lookup.find(probe)
        assert (found[:len(ids)] == slots).all()
        strangers = np.isin(probe[len(ids):], ids, invert=True)
        assert (found[len(ids):][strangers] == -1).all()

    def test_the_extreme_identities_are_identities_like_any_other(
        self, make: Callable[[], Lookup]
    ) -> None:
        extremes = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
        lookup = make()
        lookup.add(extremes, np.array([10, 11, 12, 13, 14], dtype=np.int64))
        assert lookup.find(extremes[::-1]).tolist() == [14, 13, 12, 11, 10]


def test_both_lookups_agree_on_the_same_history() -> None:
    rng = np.random.default_rng(9)
    ids = identities(rng, 20_000)
    lookups = [make() for make in LOOKUPS.values()]
    for start in range(0, len(ids), 3_000):
        for lookup in lookups:
            lookup.add(ids[start:start + 3_000], np.arange(start, min(start + 3_000, len(ids))))
        probe = np.concatenate([ids[:start + 1_500], identities(rng, 500)])
        first, second = (lookup.find(probe) for lookup in lookups)
        assert (first == second).all()
