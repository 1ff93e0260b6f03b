"""A job started from state written from a table: the running sum's totals seeded per
key by ``job_runtime.state.write`` and restored with ``--restore`` (a snapshot, no
``allowForeignJob``); every key's sum goes on from its seed, on real Spark."""

from __future__ import annotations

import pyarrow as pa
from runtime_harness import JobHarness

from job_runtime.state import write

KEYS = 97
COUNT = 5_000


def test_a_running_sum_goes_on_from_the_totals_written_for_it(harness: JobHarness) -> None:
    seeds = {key: 1_000_000 * (key + 1) for key in range(KEYS)}
    path = write(pa.table({"key": list(seeds), "value": list(seeds.values())}),
                 target=(harness.base / "seeds").as_uri(), name="totals", operator="sums",
                 key="key")
    run = harness.run(entrypoint="crashing_jobs:running_sum",
                      args={"count": COUNT, "output": str(harness.output),
                            "reduce_name": "sums"},
                      extra=["--restore", path])
    assert run.returncode == 0, run.explain()
    assert run.status is not None and run.status["restoredFrom"]["path"] == path

    final: dict[int, int] = {}
    for record in harness.output_records():
        final[record["key"]] = max(final.get(record["key"], 0), int(record["value"]))
    expected = dict(seeds)
    for seq in range(COUNT):
        expected[seq % KEYS] += seq
    assert final == expected
