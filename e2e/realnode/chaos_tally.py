"""What a chaos run did and what it cost the job: kills, restarts, takeovers, and the
time from each kill to the next completed checkpoint, printed at the run's end."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass

from e2e.controlplane.rest import quote
from e2e.realnode import scenario
from e2e.realnode.chaos_faults import KINDS, Fault
from e2e.realnode.chaos_watch import JobWatch

NOT_ATTEMPT_ENDS = frozenset({
    "StandbyFailed", "ReconcileError", "ForeignPodIgnored", "CheckpointsNotPersistent",
    "RestoredFromFallback", "InvalidSpec",
})
"""Warning reasons the operator posts for something other than the end of an attempt."""


def percentile(values: list[float], share: float) -> float:
    """The ``share`` percentile by nearest rank: with a few dozen recoveries, an
    interpolated p99 would be a value no recovery took."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(share * len(ordered))))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    count: int


def job_events(job: scenario.JobHandle) -> list[Event]:
    """The job's Events with their types and counts (an Event may stand for several)."""
    items = job.rest.get(f"/api/v1/namespaces/{quote(job.namespace)}/events",
                         query={"fieldSelector": f"involvedObject.name={job.name}"})["items"]
    return [Event(type=str(e.get("type")), reason=str(e.get("reason")),
                  message=str(e.get("message")), count=int(e.get("count") or 1))
            for e in items]


@dataclass(frozen=True)
class SecondJob:
    """The Kafka job of a run: what it read and wrote, what the chaos cost it."""

    name: str
    restarts: int
    restarts_not_from_driver_kills: list[str]
    checkpoints: int
    records_in: int
    records_out: int

    def lines(self) -> list[str]:
        out = [f"  {self.name}: {self.records_in} records in, {self.records_out} out "
               f"(read_committed), restarts {self.restarts}, {self.checkpoints} checkpoints "
               f"seen"]
        if self.restarts_not_from_driver_kills:
            out.append(f"  {self.name} restarts not from a driver kill: "
                       + "; ".join(self.restarts_not_from_driver_kills))
        return out


@dataclass(frozen=True)
class Tally:
    """What a chaos run did and what it cost the job, printed at its end."""

    seed: int
    chaos_seconds: float
    faults: list[Fault]
    missed: Counter[str]
    restarts: int
    takeovers: int
    restarts_not_from_driver_kills: list[str]
    recoveries: dict[str, list[float]]
    unrecovered: list[Fault]
    standby_failures: int
    checkpoints: int
    second: SecondJob | None = None

    def lines(self) -> list[str]:
        kills = Counter(fault.kind for fault in self.faults)
        every = [value for values in self.recoveries.values() for value in values]
        out = [
            f"chaos tally (seed {self.seed}, {self.chaos_seconds:.0f}s of chaos, "
            f"{self.checkpoints} checkpoints seen)",
            "  kills: " + ", ".join(f"{kind} {kills.get(kind, 0)}" for kind in KINDS)
            + f" (total {len(self.faults)})",
            f"  restarts {self.restarts}, of which standby takeovers {self.takeovers}; "
            f"standby failures reported {self.standby_failures}",
        ]
        if self.restarts_not_from_driver_kills:
            out.append("  restarts not from a driver kill: "
                       + "; ".join(self.restarts_not_from_driver_kills))
        if self.missed:
            out.append("  strikes missed: " + ", ".join(f"{k} {v}" for k, v in self.missed.items()))
        if every:
            out.append(f"  kill -> next completed checkpoint: p50 {percentile(every, 0.5):.1f}s, "
                       f"p99 {percentile(every, 0.99):.1f}s over {len(every)} kills")
        for kind in KINDS:
            values = self.recoveries.get(kind) or []
            if values:
                out.append(f"    {kind}: p50 {percentile(values, 0.5):.1f}s, "
                           f"p99 {percentile(values, 0.99):.1f}s, "
                           f"max {max(values):.1f}s, mean {statistics.fmean(values):.1f}s "
                           f"(n={len(values)})")
        if self.unrecovered:
            out.append("  kills with no checkpoint after them: "
                       + ", ".join(f"{f.kind} {f.pod}" for f in self.unrecovered))
        if self.second is not None:
            out.extend(self.second.lines())
        return out


def recoveries(faults: list[Fault], watch: JobWatch, *, kafka_watch: JobWatch | None = None
               ) -> tuple[dict[str, list[float]], list[Fault]]:
    """Per kind, the seconds from each kill to the next completed checkpoint of the job
    that recovers from it (the Kafka job's for its driver and the broker); and the
    kills no checkpoint followed."""
    found: dict[str, list[float]] = {}
    unrecovered: list[Fault] = []
    for fault in faults:
        recovering = kafka_watch if fault.job_kind == "kafka" and kafka_watch else watch
        seen = recovering.first_completed_after(fault.wall)
        if seen is None:
            unrecovered.append(fault)
        else:
            found.setdefault(fault.kind, []).append(seen.completed - fault.wall)
    return found, unrecovered
