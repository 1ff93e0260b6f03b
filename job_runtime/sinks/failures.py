"""How a sink fails: a record refused for good, or output that cannot get out.

A sink that retries every failure at each checkpoint never fails and never recovers
either: one record the system written to will never take (larger than its limit, a
value the encoder cannot write, a constraint it violates) holds every later interval
behind it, and the job goes on saying Running. Failures are therefore classed:

* **rejected** (:class:`RejectedRecordError`, raised by a send): retrying cannot help.
  The sink either routes the record aside (``bad_records="dead-letter"``) and goes on,
  or ends the job with one line naming the sink, the checkpoint and the record's
  position in the interval. The restored checkpoint holds the same record, so a
  restart would meet it again: the failure is permanent.
* **retriable** (anything else: a broker or database away): later intervals wait in
  order, and the sink tries again at each completed checkpoint, until it has failed
  for longer than the stall bound (``spec.health.sinkStallTimeout``); then it reports
  :attr:`SinkFailureKind.STALLED`, which restarts the job.

Either ends as a :class:`SinkFailedError`, which the subtask reports to the
coordinator (a ``sink_failure`` message) so that the driver exits with the code of
its kind, not as an anonymous task failure.
"""

from __future__ import annotations

import enum

from cjob_checkpoint.keyword_error import keyword_error
from job_runtime.errors import RuntimeJobError

__all__ = ["BadRecords", "RejectedRecordError", "SinkFailedError", "SinkFailureKind"]


class BadRecords(enum.StrEnum):
    """What a sink does with a record its system refuses for good."""

    FAIL = "fail"
    DEAD_LETTER = "dead-letter"


class SinkFailureKind(enum.StrEnum):
    REJECTED = "rejected"
    """A record was refused for good and the sink routes none aside (permanent)."""
    STALLED = "stalled"
    """Output could not be delivered for longer than the stall bound (restarted)."""


@keyword_error
class RejectedRecordError(RuntimeJobError):
    """Raised by a send function: the record at ``position`` of the records it was given
    will never be accepted. The write-ahead sink turns it into a
    :class:`SinkFailedError` that names the interval."""

    position: int
    problem: str

    def describe(self) -> str:
        return f"record {self.position} was refused: {self.problem}"


@keyword_error
class SinkFailedError(RuntimeJobError):
    """A sink failed in a way that ends the attempt, with the facts a user needs."""

    kind: SinkFailureKind
    sink: str
    subtask: int
    checkpoint_id: int
    problem: str

    def describe(self) -> str:
        match self.kind:
            case SinkFailureKind.REJECTED:
                return (f"the {self.sink} sink refused a record for good (subtask "
                        f"{self.subtask}, interval of checkpoint {self.checkpoint_id}): "
                        f"{_one_line(self.problem)}")
            case SinkFailureKind.STALLED:
                return (f"the {self.sink} sink stalled (subtask {self.subtask}, interval of "
                        f"checkpoint {self.checkpoint_id}): {_one_line(self.problem)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())
