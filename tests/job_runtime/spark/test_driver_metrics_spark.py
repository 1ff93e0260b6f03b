"""The driver serves Prometheus metrics and takes a checkpoint when asked through its store."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from pathlib import Path

from runtime_harness import JobHarness

from cjob_checkpoint.store.triggers import request_checkpoint


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def scrape(port: int) -> dict[str, float]:
    text = _metrics_text(port)
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name_labels, _, value = line.rpartition(" ")
        values[name_labels.split("{", 1)[0]] = float(value)
    return values


def milestones(port: int) -> dict[str, float]:
    text = _metrics_text(port)
    found = re.findall(r'^cjob_job_milestone_timestamp_seconds\{[^}]*milestone="(\w+)"[^}]*\}'
                       r"\s+(\S+)$", text, flags=re.MULTILINE)
    return {name: float(value) for name, value in found}


def test_metrics_answer_while_running_and_a_requested_checkpoint_is_acknowledged(
    tmp_path: Path,
) -> None:
    job = JobHarness(tmp_path, name="metrics")
    port = free_port()
    count = 12_000
    proc = job.start(entrypoint="crashing_jobs:running_sum",
                     args={"count": count, "rate": 800, "output": str(job.output)},
                     extra=["--metrics-port", str(port), "--checkpoint-interval", "60"])
    try:
        job.wait_status(1, lambda s: s.get("recordsIn", 0) > 0, proc=proc,
                        what="records flow")
        # Periodic checkpoints are an hour apart here: this one comes from the request.
        request_checkpoint(str(job.store), nonce="manual-1")
        deadline = time.monotonic() + 120
        ack = job.store / "trigger.ack"
        while not ack.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, "the driver ended before serving the request"
            time.sleep(0.2)
        assert ack.read_text().startswith("manual-1:"), "the request was not acknowledged"
        acknowledged_id = int(ack.read_text().rsplit(":", 1)[1])
        metrics = scrape(port)
        assert metrics["cjob_checkpoint_completed_total"] >= 1
        assert metrics["cjob_checkpoint_last_completed_id"] == acknowledged_id
        assert metrics["cjob_checkpoint_last_completed_timestamp_seconds"] > 0
        assert metrics["cjob_job_restored_checkpoint_id"] == -1
        assert "cjob_checkpoint_duration_seconds_count" in metrics
        assert "cjob_checkpoint_sync_seconds_count" in metrics
        times = milestones(port)
        assert (times["driver_started"] <= times["spark_ready"] <= times["stage_launched"]
                <= times["first_record"]), times
    finally:
        finished = job.finish(proc, attempt=1)
    assert finished.returncode == 0, finished.explain()
    assert job.running_sum_problems(count=count) == []
