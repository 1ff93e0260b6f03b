"""The typed, versioned messages between the coordinator and the subtasks.

Every message is a frozen dataclass. On the wire it is one JSON object with the
format version ``v``, a type tag ``type`` and the message's fields. Decoding
checks the version, the tag (only the kinds the receiving end accepts) and every
field's type, and raises :class:`MessageError` with a sentence that names what
was wrong; the RPC layer then closes that one connection. JSON, not pickle: a
control message must never be able to run code in the process that reads it,
even if everything else failed.

State handles travel as what they are (:class:`StateHandle`, key-group ranges);
the checkpoint to restore travels as the :class:`CheckpointMetadata` that
``_metadata`` holds; source positions and sink transactions are the source's and
the sink's own JSON values.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar, TypeAlias

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.fields import Json, JsonFields
from cjob_checkpoint.metadata import CheckpointMetadata, MetadataError, SharedStateFile
from job_runtime.sinks.failures import SinkFailedError, SinkFailureKind
from job_runtime.sinks.health import SinkHealth
from job_runtime.sources.source_contract import SourceBacklog

FORMAT_VERSION = 5
"""Version 2: ``registered`` names the driver attempt (a standby's subtasks register
before it is promoted, so the attempt cannot travel in the Spark closure). Version 3:
an ack carries the pre-commits of every sink of the task by name (``sinks``), since a
job may have several. Version 4: ``sink_failure`` says a sink ended the attempt and
why, and progress carries what the sinks hold back. Version 5: a registration carries
the subtask's channel address and the coordinator answers every subtask with ``peers``
once the whole epoch registered (the exchange Spark's ``allGather`` did, which waits
in whole seconds)."""


class MessageError(ValueError):
    """A control message that this runtime cannot accept."""


class _Fields(JsonFields):
    """Typed reads from one decoded JSON object, with errors that name the field."""

    error = MessageError


# --------------------------------------------------------------------------- parts


def _handle_to_json(handle: StateHandle) -> dict[str, Json]:
    return handle.to_dict()


def _handle_from_json(fields: _Fields) -> StateHandle:
    return StateHandle(uri=fields.text("uri"), size_bytes=fields.integer("sizeBytes"),
                       crc32=fields.integer("crc32"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelAddress:
    """Where a subtask's channel listener answers: its peers connect there."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.host or not 0 < self.port < 65536:
            raise MessageError(f"a channel address needs a host and a port in 1-65535, "
                               f"got {self.host!r}:{self.port}")

    def to_json(self) -> dict[str, Json]:
        return {"host": self.host, "port": self.port}

    @classmethod
    def from_json(cls, fields: _Fields) -> ChannelAddress:
        return cls(host=fields.text("host"), port=fields.integer("port"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorState:
    """Where one keyed operator's state of one subtask lies, and which key groups it holds."""

    handle: StateHandle
    key_groups: tuple[int, int]
    shared: tuple[SharedStateFile, ...] = ()
    """Shared files an incremental snapshot references (absent on the wire when none)."""

    def to_json(self) -> dict[str, Json]:
        data: dict[str, Json] = {**_handle_to_json(self.handle),
                                 "keyGroups": list(self.key_groups)}
        if self.shared:
            data["shared"] = [f.to_json() for f in self.shared]
        return data

    @classmethod
    def from_json(cls, fields: _Fields) -> OperatorState:
        groups = fields.value("keyGroups")
        if (not isinstance(groups, list) or len(groups) != 2
                or not all(isinstance(g, int) and not isinstance(g, bool) for g in groups)):
            raise MessageError("'keyGroups' of an operator state must be two integers")
        shared = tuple(
            SharedStateFile(name=item.text("name"), handle=_handle_from_json(item))
            for item in (fields.child(raw, where="a shared file of an operator state")
                         for raw in (fields.array("shared") if fields.has("shared") else [])))
        return cls(handle=_handle_from_json(fields), key_groups=(groups[0], groups[1]),
                   shared=shared)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AckState:
    """What one task's acknowledgement contributes to ``_metadata``."""

    sources: dict[str, Json] = dataclasses.field(default_factory=dict)
    operators: dict[str, OperatorState] = dataclasses.field(default_factory=dict)
    channels: StateHandle | None = None
    sinks: dict[str, Json] = dataclasses.field(default_factory=dict)
    """Sink name -> what its pre-commit returned (the pending transactions)."""

    def to_json(self) -> dict[str, Json]:
        return {
            "sources": self.sources,
            "operators": {uid: op.to_json() for uid, op in self.operators.items()},
            "channels": None if self.channels is None else _handle_to_json(self.channels),
            "sinks": self.sinks,
        }

    @classmethod
    def from_json(cls, fields: _Fields) -> AckState:
        operators = {uid: OperatorState.from_json(_Fields(op, where=f"operator state {uid!r}"))
                     for uid, op in fields.object("operators").items()}
        channels = fields.optional_object("channels")
        return cls(sources=fields.object("sources"), operators=operators,
                   channels=None if channels is None
                   else _handle_from_json(_Fields(channels, where="channel state")),
                   sinks=fields.object("sinks"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AckStats:
    sync_ms: float = 0.0
    alignment_ms: float = 0.0
    async_ms: float = 0.0
    bytes: int = 0

    def to_json(self) -> dict[str, Json]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, fields: _Fields) -> AckStats:
        return cls(sync_ms=fields.number("sync_ms"), alignment_ms=fields.number("alignment_ms"),
                   async_ms=fields.number("async_ms"), bytes=fields.integer("bytes"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskMetrics:
    """A subtask's counters and milestones, reported with progress and when done."""

    records_in: int = 0
    records_out: int = 0
    blocked_seconds: float = 0.0
    first_record_at: float | None = None
    last_record_at: float | None = None
    restore_seconds: float | None = None
    rejected_connections: int = 0
    source_backlog: tuple[SourceBacklog, ...] = ()
    """The lag of each partition this subtask reads, where the source knows it."""
    watermark: int | None = None
    """The lowest event-time watermark of this subtask's keyed tasks (ms since the
    epoch); ``None`` without event time, or before any watermark arrived."""
    late_records: int = 0
    """Records its windows dropped for coming after their window was gone."""
    sinks: SinkHealth = dataclasses.field(default_factory=SinkHealth)
    """What this subtask's sink writers hold back (all its sinks together)."""

    def to_json(self) -> dict[str, Json]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["source_backlog"] = [b.to_json() for b in self.source_backlog]
        fields["sinks"] = dataclasses.asdict(self.sinks)
        return fields

    @classmethod
    def from_json(cls, fields: _Fields) -> TaskMetrics:
        return cls(records_in=fields.integer("records_in"), records_out=fields.integer("records_out"),
                   blocked_seconds=fields.number("blocked_seconds"),
                   first_record_at=fields.optional_number("first_record_at"),
                   last_record_at=fields.optional_number("last_record_at"),
                   restore_seconds=fields.optional_number("restore_seconds"),
                   rejected_connections=fields.integer("rejected_connections"),
                   source_backlog=tuple(
                       SourceBacklog.from_json(b) for b in
                       (fields.array("source_backlog") if fields.has("source_backlog") else [])),
                   # Absent from an older subtask's report: no event time there.
                   watermark=fields.optional_integer("watermark"),
                   late_records=fields.integer("late_records") if fields.has("late_records")
                   else 0,
                   sinks=_sink_health(fields.nested("sinks")) if fields.has("sinks")
                   else SinkHealth())


def _sink_health(fields: _Fields) -> SinkHealth:
    return SinkHealth(pending_intervals=fields.integer("pending_intervals"),
                      pending_records=fields.integer("pending_records"),
                      pending_bytes=fields.integer("pending_bytes"),
                      oldest_pending_seconds=fields.number("oldest_pending_seconds"),
                      dead_letters=fields.integer("dead_letters"))


# --------------------------------------------------------------------------- subtask -> coordinator


@dataclasses.dataclass(frozen=True, kw_only=True)
class _FromSubtask:
    TYPE: ClassVar[str]
    epoch: int
    subtask: int

    def _fields(self) -> dict[str, Json]:
        return {}

    def to_json(self) -> dict[str, Json]:
        return {"epoch": self.epoch, "subtask": self.subtask, **self._fields()}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Register(_FromSubtask):
    TYPE: ClassVar[str] = "register"
    host: str
    pid: int
    channel: ChannelAddress
    """Where the subtask's channel listener answers (sent on to its peers)."""

    def _fields(self) -> dict[str, Json]:
        return {"host": self.host, "pid": self.pid, "channel": self.channel.to_json()}

    @classmethod
    def from_json(cls, f: _Fields) -> Register:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"), host=f.text("host"),
                   pid=f.integer("pid"), channel=ChannelAddress.from_json(f.nested("channel")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ready(_FromSubtask):
    TYPE: ClassVar[str] = "ready"

    @classmethod
    def from_json(cls, f: _Fields) -> Ready:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourcesFinished(_FromSubtask):
    TYPE: ClassVar[str] = "sources_finished"

    @classmethod
    def from_json(cls, f: _Fields) -> SourcesFinished:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress(_FromSubtask):
    TYPE: ClassVar[str] = "progress"
    metrics: TaskMetrics

    def _fields(self) -> dict[str, Json]:
        return {"metrics": self.metrics.to_json()}

    @classmethod
    def from_json(cls, f: _Fields) -> Progress:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"),
                   metrics=TaskMetrics.from_json(f.nested("metrics")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Done(_FromSubtask):
    TYPE: ClassVar[str] = "done"
    metrics: TaskMetrics

    def _fields(self) -> dict[str, Json]:
        return {"metrics": self.metrics.to_json()}

    @classmethod
    def from_json(cls, f: _Fields) -> Done:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"),
                   metrics=TaskMetrics.from_json(f.nested("metrics")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ack(_FromSubtask):
    TYPE: ClassVar[str] = "ack"
    checkpoint_id: int
    stage: int
    state: AckState
    stats: AckStats

    def _fields(self) -> dict[str, Json]:
        return {"checkpoint_id": self.checkpoint_id, "stage": self.stage,
                "state": self.state.to_json(), "stats": self.stats.to_json()}

    @classmethod
    def from_json(cls, f: _Fields) -> Ack:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"),
                   checkpoint_id=f.integer("checkpoint_id"), stage=f.integer("stage"),
                   state=AckState.from_json(f.nested("state")),
                   stats=AckStats.from_json(f.nested("stats")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decline(_FromSubtask):
    TYPE: ClassVar[str] = "decline"
    checkpoint_id: int
    reason: str
    subsumed: bool = False

    def _fields(self) -> dict[str, Json]:
        return {"checkpoint_id": self.checkpoint_id, "reason": self.reason,
                "subsumed": self.subsumed}

    @classmethod
    def from_json(cls, f: _Fields) -> Decline:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"),
                   checkpoint_id=f.integer("checkpoint_id"), reason=f.text("reason"),
                   subsumed=f.flag("subsumed"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class UserError(_FromSubtask):
    TYPE: ClassVar[str] = "user_error"
    operator: str
    details: str

    def _fields(self) -> dict[str, Json]:
        return {"operator": self.operator, "details": self.details}

    @classmethod
    def from_json(cls, f: _Fields) -> UserError:
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"), operator=f.text("operator"),
                   details=f.text("details"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkFailure(_FromSubtask):
    """A sink ended the attempt: a record refused for good, or output stalled."""

    TYPE: ClassVar[str] = "sink_failure"
    kind: SinkFailureKind
    sink: str
    checkpoint_id: int
    problem: str

    def _fields(self) -> dict[str, Json]:
        return {"kind": self.kind.value, "sink": self.sink,
                "checkpoint_id": self.checkpoint_id, "problem": self.problem}

    @classmethod
    def from_json(cls, f: _Fields) -> SinkFailure:
        kind = f.text("kind")
        try:
            parsed = SinkFailureKind(kind)
        except ValueError:
            raise MessageError(f"'kind' of a sink_failure message must be one of "
                               f"{', '.join(k.value for k in SinkFailureKind)}, got "
                               f"{kind!r}") from None
        return cls(epoch=f.integer("epoch"), subtask=f.integer("subtask"), kind=parsed,
                   sink=f.text("sink"), checkpoint_id=f.integer("checkpoint_id"),
                   problem=f.text("problem"))

    def error(self) -> SinkFailedError:
        return SinkFailedError(kind=self.kind, sink=self.sink, subtask=self.subtask,
                               checkpoint_id=self.checkpoint_id, problem=self.problem)


ToCoordinator: TypeAlias = (Register | Ready | SourcesFinished | Progress | Done | Ack | Decline
                            | UserError | SinkFailure)


# --------------------------------------------------------------------------- coordinator -> subtask


@dataclasses.dataclass(frozen=True, kw_only=True)
class Registered:
    TYPE: ClassVar[str] = "registered"
    attempt: int
    """The driver attempt the subtask now works for (it tags the sink's files)."""
    restore: CheckpointMetadata | None
    """The ``_metadata`` of the checkpoint to restore, ``None`` for an empty start."""

    def to_json(self) -> dict[str, Json]:
        return {"attempt": self.attempt,
                "restore": None if self.restore is None else self.restore.to_json()}

    @classmethod
    def from_json(cls, f: _Fields) -> Registered:
        attempt = f.integer("attempt")
        restore = f.optional_object("restore")
        if restore is None:
            return cls(attempt=attempt, restore=None)
        try:
            return cls(attempt=attempt, restore=CheckpointMetadata.from_json(restore))
        except MetadataError as exc:
            raise MessageError(f"the checkpoint to restore in {f.where}: {exc}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Peers:
    """Every subtask's channel address, in subtask order: sent to each subtask of an
    epoch once all of them registered, so a subtask opens its channels only when
    every peer it sends to is listening."""

    TYPE: ClassVar[str] = "peers"
    channels: tuple[ChannelAddress, ...]

    def to_json(self) -> dict[str, Json]:
        return {"channels": [c.to_json() for c in self.channels]}

    @classmethod
    def from_json(cls, f: _Fields) -> Peers:
        return cls(channels=tuple(
            ChannelAddress.from_json(f.child(raw, where=f"a channel of {f.where}"))
            for raw in f.array("channels")))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rejected:
    TYPE: ClassVar[str] = "rejected"
    reason: str

    def to_json(self) -> dict[str, Json]:
        return {"reason": self.reason}

    @classmethod
    def from_json(cls, f: _Fields) -> Rejected:
        return cls(reason=f.text("reason"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trigger:
    TYPE: ClassVar[str] = "trigger"
    checkpoint_id: int
    timestamp: float
    final: bool = False

    def to_json(self) -> dict[str, Json]:
        return {"checkpoint_id": self.checkpoint_id, "timestamp": self.timestamp,
                "final": self.final}

    @classmethod
    def from_json(cls, f: _Fields) -> Trigger:
        return cls(checkpoint_id=f.integer("checkpoint_id"), timestamp=f.number("timestamp"),
                   final=f.flag("final"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Complete:
    TYPE: ClassVar[str] = "complete"
    checkpoint_id: int
    final: bool = False

    def to_json(self) -> dict[str, Json]:
        return {"checkpoint_id": self.checkpoint_id, "final": self.final}

    @classmethod
    def from_json(cls, f: _Fields) -> Complete:
        return cls(checkpoint_id=f.integer("checkpoint_id"), final=f.flag("final"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Abort:
    TYPE: ClassVar[str] = "abort"
    checkpoint_id: int
    reason: str

    def to_json(self) -> dict[str, Json]:
        return {"checkpoint_id": self.checkpoint_id, "reason": self.reason}

    @classmethod
    def from_json(cls, f: _Fields) -> Abort:
        return cls(checkpoint_id=f.integer("checkpoint_id"), reason=f.text("reason"))


ToSubtask: TypeAlias = Registered | Peers | Rejected | Trigger | Complete | Abort
Message: TypeAlias = ToCoordinator | ToSubtask

TO_COORDINATOR: dict[str, Any] = {cls.TYPE: cls for cls in (
    Register, Ready, SourcesFinished, Progress, Done, Ack, Decline, UserError, SinkFailure)}
TO_SUBTASK: dict[str, Any] = {cls.TYPE: cls for cls in (
    Registered, Peers, Rejected, Trigger, Complete, Abort)}


# --------------------------------------------------------------------------- codec


def encode(message: Message) -> bytes:
    """One message as UTF-8 JSON; raises :class:`MessageError` for a value JSON cannot hold."""
    try:
        body = json.dumps({"v": FORMAT_VERSION, "type": message.TYPE, **message.to_json()},
                          separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"a {message.TYPE} message holds a value JSON cannot carry: "
                           f"{exc}") from exc
    return body.encode()


def _decode(data: bytes, kinds: dict[str, Any], *, receiver: str) -> Any:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MessageError(f"a control message is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise MessageError(f"a control message must be a JSON object, got {type(obj).__name__}")
    version = obj.get("v")
    if version != FORMAT_VERSION:
        raise MessageError(f"control message format version {version!r} is not supported "
                           f"(this runtime speaks version {FORMAT_VERSION})")
    kind = obj.get("type")
    cls = kinds.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MessageError(f"unknown control message type {kind!r} for the {receiver} "
                           f"(expected one of {', '.join(sorted(kinds))})")
    return cls.from_json(_Fields(obj, where=f"a {kind} message"))


def decode_to_coordinator(data: bytes) -> ToCoordinator:
    """A message a subtask sent; raises :class:`MessageError`."""
    message: ToCoordinator = _decode(data, TO_COORDINATOR, receiver="coordinator")
    return message


def decode_to_subtask(data: bytes) -> ToSubtask:
    """A message the coordinator sent; raises :class:`MessageError`."""
    message: ToSubtask = _decode(data, TO_SUBTASK, receiver="subtask")
    return message
