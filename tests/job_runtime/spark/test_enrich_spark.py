"""Clicks enriched from a table every subtask keeps, on real Spark: every click once,
with its product's row, also when the enriching subtask dies mid-run, and, after a
driver kill and a restart at three subtasks, with the table of the checkpoint even
though its files changed meanwhile; the checkpoint's table reads back whole."""

from __future__ import annotations

import enrich_jobs
from runtime_harness import JobHarness

from job_runtime.state import read

CLICKS = 1_500


def clicks(harness: JobHarness) -> list[tuple[int, str, float | None]]:
    return sorted((r["click"], r["sku"], r["price"]) for r in harness.output_records())


def test_every_click_is_enriched_once_through_a_subtask_kill(harness: JobHarness) -> None:
    enrich_jobs.write_inputs(harness.base, clicks=CLICKS)
    expected = enrich_jobs.reference(harness.base)
    marker = harness.base / "crashed"
    run = harness.run(entrypoint="enrich_jobs:enriched", args={
        "products": str(harness.base / "products"), "clicks": str(harness.base / "clicks"),
        "output": str(harness.output), "crash_at": CLICKS // 2, "crash_marker": str(marker),
        "batch_size": 50, "delay_ms": 1})
    assert run.returncode == 0, run.explain()
    assert marker.exists(), "the subtask never reached the click that kills it"
    assert run.status is not None and run.status["restoredFrom"] is not None
    assert clicks(harness) == expected
    assert any(price is None for _, _, price in expected), "some clicks should lack a row"


def test_a_restart_at_three_subtasks_enriches_from_the_checkpoints_table(
        harness: JobHarness) -> None:
    enrich_jobs.write_inputs(harness.base, clicks=CLICKS)
    expected = enrich_jobs.reference(harness.base)
    args = {"products": str(harness.base / "products"), "clicks": str(harness.base / "clicks"),
            "output": str(harness.output), "batch_size": 50, "delay_ms": 3}
    first = harness.run(entrypoint="enrich_jobs:enriched", args=args,
                        env={"CJOB_FAULTS": "driver.before-notify@3"})
    assert first.returncode == -9, first.explain()
    assert first.status is not None
    table = read(first.status["latestCheckpoint"]["path"], operator="priced")
    assert table.num_rows == enrich_jobs.PRODUCTS
    assert dict(zip(table.column("sku").to_pylist(), table.column("price").to_pylist(),
                    strict=True))["sku-3"] == 1.0
    # The table's files change; a table without refresh= is the checkpoint's.
    enrich_jobs.write_products(harness.base / "products", price_factor=10.0)
    second = harness.run(entrypoint="enrich_jobs:enriched", args=args, attempt=2,
                         parallelism=3, master="local[3]", extra=["--restore", "latest"])
    assert second.returncode == 0, second.explain()
    assert second.status is not None and second.status["restoredFrom"]["id"] == 3
    assert clicks(harness) == expected
