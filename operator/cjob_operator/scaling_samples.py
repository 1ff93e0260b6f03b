"""Readings of a running driver's metrics, kept for the autoscaler (``spec.autoscaler``).

The driver serves its metrics on the port the operator gave it; the operator reads
them as Prometheus would (``GET /metrics`` at the pod's address), at most every
``every_seconds`` per job, and keeps the last ``keep_seconds`` of readings in memory:
an operator that restarts collects again, and the autoscaler waits for enough of them
(``cjob_lifecycle.scaling_decision.MIN_WINDOW_SECONDS``). From each reading it takes
what the decision needs: the sources' records read so far
(``cjob_job_records_in_total``) and their lag (``cjob_job_source_lag_records``, summed
over partitions; only Kafka sources report it). A driver that cannot be reached is no
reading, not an error: the job's own health is the lifecycle's concern.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Callable, Hashable, Mapping
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from cjob_lifecycle.observed import MetricSample

_log = logging.getLogger(__name__)

RECORDS_IN = "cjob_job_records_in_total"
SOURCE_LAG = "cjob_job_source_lag_records"
FETCH_TIMEOUT_SECONDS = 2.0
MAX_BODY_BYTES = 4 << 20
"""A driver's metrics are a few kilobytes; more is not a driver's answer."""

Fetch = Callable[[str], str]


def fetch_metrics(url: str) -> str:
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response:
        body: bytes = response.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"{url} answered more than {MAX_BODY_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


def parse_sample(text: str, *, at: datetime, attempt: int) -> MetricSample | None:
    """The reading in a metrics page, or None when it holds no records counter (not a
    driver's page, or one that has not started its sources)."""
    records: float | None = None
    lag: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == RECORDS_IN:
                records = (records or 0.0) + float(sample.value)
            elif sample.name == SOURCE_LAG:
                lag = (lag or 0.0) + float(sample.value)
    if records is None:
        return None
    return MetricSample(at=at, attempt=attempt, records_in=records, lag_records=lag)


class ScalingSamples:
    """Per job, the recent readings of its running driver's metrics."""

    def __init__(self, *, port: int, fetch: Fetch = fetch_metrics, every_seconds: float = 10.0,
                 keep_seconds: float = 600.0) -> None:
        self.port = port
        self.fetch = fetch
        self.every_seconds = every_seconds
        self.keep_seconds = keep_seconds
        self._samples: dict[Hashable, list[MetricSample]] = {}
        self._lock = threading.Lock()

    def observe(self, key: Hashable, *, pod: Mapping[str, Any] | None, attempt: int,
                now: datetime) -> tuple[MetricSample, ...]:
        """Read the driver ``pod`` unless a reading of it is recent; the kept readings."""
        with self._lock:
            kept = [s for s in self._samples.get(key, [])
                    if (now - s.at).total_seconds() <= self.keep_seconds]
            recent = bool(kept) and kept[-1].attempt == attempt and \
                (now - kept[-1].at).total_seconds() < self.every_seconds
        address = ((pod or {}).get("status") or {}).get("podIP")
        if not recent and address:
            sample = self._read(address, attempt=attempt, now=now)
            if sample is not None:
                kept.append(sample)
        with self._lock:
            self._samples[key] = kept
        return tuple(kept)

    def _read(self, address: str, *, attempt: int, now: datetime) -> MetricSample | None:
        host = f"[{address}]" if ":" in address else address
        url = f"http://{host}:{self.port}/metrics"
        try:
            return parse_sample(self.fetch(url), at=now, attempt=attempt)
        except (OSError, ValueError) as exc:
            _log.debug("no metrics from %s: %s", url, exc)
            return None

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._samples.pop(key, None)
