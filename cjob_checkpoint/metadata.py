"""``_metadata``: what one completed checkpoint consists of, as a versioned type.

The coordinator builds a :class:`CheckpointMetadata` from the tasks'
acknowledgements and writes it once every task acknowledged; the driver reads it
to choose and check the restore point; the coordinator hands it to every subtask
of a new epoch, whose tasks take their part: source positions per split, keyed
state handles whose key-group range overlaps theirs, in-flight channel data of
their stage, and the transactions each of their sinks must commit.

The file outlives the code that wrote it (a job restores checkpoints an older
runtime wrote), so it carries ``version`` and :meth:`CheckpointMetadata.from_json`
reads every version ever written; ``tests/cjob_checkpoint/metadata_formats/`` holds a
sample of each. A new layout gets a new version number and a reader branch here,
never a silent change of the old one.

Source positions and sink transactions are the source's and the sink's own JSON
values (each defines what a position or a pending transaction is); this module
keeps them whole and hands them back to the same kind of source or sink.
"""

from __future__ import annotations

import dataclasses
import json

from cjob_checkpoint.checkpoint_storage import StateHandle
from cjob_checkpoint.fields import Json, JsonFields

FORMAT_VERSION = 4
"""The ``version`` this runtime writes.

Version 2 added ``shared`` to keyed state handles: the files of an incremental
(``rocksdb``) snapshot that live in the job's shared directory and that several
checkpoints may reference. Version 1 documents have none and read unchanged.

Version 3 keys ``sinks`` by sink name, then subtask: a job may have several sinks
(a side output's among them). Versions 1 and 2 had one sink, keyed by subtask only;
their transactions read as :data:`MAIN_SINK`'s.

Version 4 adds ``pipeline``: what each keyed operator of the job that wrote it was
(uid, kind, stage, key, state layout), so that a restore can tell an operator whose
state it holds apart from a changed one. Earlier documents have none: a restore
then compares operator uids only.
"""

READABLE_VERSIONS = (1, 2, 3, 4)
"""Every ``version`` this runtime reads: each one any release ever wrote."""

MAIN_SINK = "sink"
"""The name of a job's main sink unless the job names it otherwise, and the owner of
the sink transactions of a version 1 or 2 document."""


class MetadataError(ValueError):
    """A ``_metadata`` document this runtime cannot read; the message names the problem."""


class _Fields(JsonFields):
    error = MetadataError


def _handle_from(fields: _Fields) -> StateHandle:
    return StateHandle(uri=fields.text("uri"), size_bytes=fields.integer("sizeBytes"),
                       crc32=fields.integer("crc32"))


def _index(key: str, *, what: str) -> int:
    """A map key that must be a non-negative integer written as a string."""
    if not key.isdigit():
        raise MetadataError(f"{what} {key!r} is not a non-negative integer")
    return int(key)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SharedStateFile:
    """A file of an incremental snapshot kept in the job's shared directory.

    ``name`` is the file's name inside the snapshot (what a restore calls it
    locally); ``handle`` is where it lies, under a name no other upload uses.
    Several checkpoints may list the same handle; it is deleted only once no
    retained checkpoint lists it.
    """

    name: str
    handle: StateHandle

    def to_json(self) -> dict[str, Json]:
        return {"name": self.name, **self.handle.to_dict()}

    @classmethod
    def from_json(cls, fields: _Fields) -> SharedStateFile:
        return cls(name=fields.text("name"), handle=_handle_from(fields))


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyedStateHandle:
    """One subtask's state of one keyed operator, and the key groups it holds."""

    subtask: int
    handle: StateHandle
    key_groups: tuple[int, int]
    """``[start, stop)`` of the key groups the state file holds."""
    shared: tuple[SharedStateFile, ...] = ()
    """Shared files the state file builds on (incremental snapshots; version 2)."""

    def overlaps(self, key_groups: range) -> bool:
        start, stop = self.key_groups
        return start < key_groups.stop and key_groups.start < stop

    def to_json(self) -> dict[str, Json]:
        data: dict[str, Json] = {"subtask": self.subtask, **self.handle.to_dict(),
                                 "keyGroups": list(self.key_groups)}
        if self.shared:
            data["shared"] = [f.to_json() for f in self.shared]
        return data

    @classmethod
    def from_json(cls, fields: _Fields, *, version: int = FORMAT_VERSION) -> KeyedStateHandle:
        groups = fields.array("keyGroups")
        if (len(groups) != 2
                or not all(isinstance(g, int) and not isinstance(g, bool) for g in groups)):
            raise MetadataError(f"'keyGroups' of {fields.where} must be two integers")
        shared: tuple[SharedStateFile, ...] = ()
        if fields.has("shared"):
            if version < 2:
                raise MetadataError(f"{fields.where} has 'shared' files, which format "
                                    f"version {version} does not know")
            shared = tuple(SharedStateFile.from_json(
                fields.child(item, where=f"a shared file of {fields.where}"))
                for item in fields.array("shared"))
        return cls(subtask=fields.integer("subtask"), handle=_handle_from(fields),
                   key_groups=(groups[0], groups[1]), shared=shared)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChannelStateHandle:
    """The in-flight records one subtask's stage held at an unaligned barrier."""

    subtask: int
    handle: StateHandle

    def to_json(self) -> dict[str, Json]:
        return {"subtask": self.subtask, **self.handle.to_dict()}

    @classmethod
    def from_json(cls, fields: _Fields) -> ChannelStateHandle:
        return cls(subtask=fields.integer("subtask"), handle=_handle_from(fields))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SinkTransactions:
    """The transactions one subtask's sink ``sink`` pre-committed and had not yet
    committed.

    ``pending`` is what the sink's ``snapshot`` returned; a restore hands it back
    to ``restore``, which commits it (commits are idempotent).
    """

    subtask: int
    pending: Json
    sink: str = MAIN_SINK


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorDescriptor:
    """What a keyed operator's state depends on, as the job that wrote a checkpoint
    built it: a restore into a pipeline whose operator of this ``uid`` differs in any
    field cannot read the state as it was meant (version 4)."""

    uid: str
    kind: str
    """The operator's kind (``reduce``, ``aggregate``, ``window_aggregate``, ...)."""
    stage: int
    """The stage it starts (its in-flight data, unaligned, is kept per stage)."""
    key: str
    """The key's columns, comma-separated; ``function`` for a key function."""
    state: str
    """Its state's layout where the pipeline fixes it (aggregates, window), else empty."""

    def to_json(self) -> dict[str, Json]:
        return {"uid": self.uid, "kind": self.kind, "stage": self.stage, "key": self.key,
                "state": self.state}

    @classmethod
    def from_json(cls, fields: JsonFields) -> OperatorDescriptor:
        return cls(uid=fields.text("uid"), kind=fields.text("kind"),
                   stage=fields.integer("stage"), key=_text_or_empty(fields, "key"),
                   state=_text_or_empty(fields, "state"))


def _text_or_empty(fields: JsonFields, name: str) -> str:
    value = fields.value(name)
    if not isinstance(value, str):
        raise MetadataError(f"{name} of an operator descriptor must be a string, got "
                            f"{type(value).__name__}")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnapshotOrigin:
    """What a snapshot's ``_metadata`` says about where it came from (version 4): a
    self-contained copy of a completed checkpoint, which no pruning or deletion of the
    job's checkpoints touches."""

    name: str
    source: str
    """The ``_metadata`` of the checkpoint it copies."""
    taken_at: float

    def to_json(self) -> dict[str, Json]:
        return {"name": self.name, "source": self.source, "takenAt": self.taken_at}

    @classmethod
    def from_json(cls, fields: JsonFields) -> SnapshotOrigin:
        return cls(name=fields.text("name"), source=fields.text("source"),
                   taken_at=fields.number("takenAt"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointMetadata:
    """One completed checkpoint: who wrote it, and where each task's part lies."""

    job: str
    """The job id (``<name>-<uid>``) that wrote it: a restore checks it."""
    checkpoint_id: int
    timestamp: float
    final: bool
    attempt: int
    parallelism: int
    max_parallelism: int
    sources: dict[int, Json] = dataclasses.field(default_factory=dict)
    """Split index -> the source's position in that split."""
    operators: dict[str, tuple[KeyedStateHandle, ...]] = dataclasses.field(default_factory=dict)
    """Keyed operator uid -> one handle per subtask that held state."""
    channels: dict[int, tuple[ChannelStateHandle, ...]] = dataclasses.field(
        default_factory=dict)
    """Stage index -> the in-flight data its subtasks recorded (unaligned checkpoints)."""
    sinks: tuple[SinkTransactions, ...] = ()
    pipeline: tuple[OperatorDescriptor, ...] | None = None
    """The keyed operators of the job that wrote it; ``None`` when not known (before
    version 4, or written by a coordinator not told them)."""
    snapshot: SnapshotOrigin | None = None
    """Set on a snapshot's copy: its name and the checkpoint it copies."""

    # ------------------------------------------------------------------ restore views

    def source_position(self, split: int) -> Json:
        """Where to resume ``split``; ``None``: from its start."""
        return self.sources.get(split)

    def keyed_state(self, uid: str, *, key_groups: range) -> list[StateHandle]:
        """The state files of operator ``uid`` holding any of ``key_groups``.

        With another parallelism than the checkpoint's, a subtask's range overlaps
        several old ones (and each old file holds keys of several new subtasks).
        """
        return [h.handle for h in self.keyed_state_files(uid, key_groups=key_groups)]

    def keyed_state_files(self, uid: str, *, key_groups: range) -> list[KeyedStateHandle]:
        """:meth:`keyed_state` with the shared files each state file builds on, where
        this metadata says they lie (a snapshot moved them)."""
        return [h for h in self.operators.get(uid, ()) if h.overlaps(key_groups)]

    def shared_files(self) -> set[str]:
        """URIs of every shared file this checkpoint references (any operator, subtask)."""
        return {f.handle.uri for handles in self.operators.values() for h in handles
                for f in h.shared}

    def channel_state(self, stage: int) -> list[StateHandle]:
        """Every subtask's in-flight data of ``stage``; the reader keeps its own keys."""
        return [h.handle for h in self.channels.get(stage, ())]

    def sink_transactions(self, *, subtask: int, parallelism: int,
                          sink: str = MAIN_SINK) -> list[Json]:
        """The pending transactions of sink ``sink`` that subtask ``subtask`` of
        ``parallelism`` commits.

        Old subtask ``j`` goes to new subtask ``j % parallelism``, so every pending
        transaction is committed by exactly one subtask whatever the rescale.
        """
        by_subtask = {s.subtask: s.pending for s in self.sinks if s.sink == sink}
        mine = [by_subtask.get(j) for j in range(self.parallelism) if j % parallelism == subtask]
        return [pending for pending in mine if pending]

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Json]:
        return {
            "version": FORMAT_VERSION,
            "job": self.job,
            "checkpointId": self.checkpoint_id,
            "timestamp": self.timestamp,
            "final": self.final,
            "attempt": self.attempt,
            "parallelism": self.parallelism,
            "maxParallelism": self.max_parallelism,
            "sources": {str(split): position for split, position in self.sources.items()},
            "operators": {uid: [h.to_json() for h in handles]
                          for uid, handles in self.operators.items()},
            "channels": {str(stage): [h.to_json() for h in handles]
                         for stage, handles in self.channels.items()},
            "sinks": self._sinks_json(),
            **({} if self.pipeline is None else
               {"pipeline": [op.to_json() for op in self.pipeline]}),
            **({} if self.snapshot is None else {"snapshot": self.snapshot.to_json()}),
        }

    def _sinks_json(self) -> dict[str, Json]:
        found: dict[str, Json] = {}
        for s in self.sinks:
            by_subtask = found.setdefault(s.sink, {})
            assert isinstance(by_subtask, dict)
            by_subtask[str(s.subtask)] = s.pending
        return found

    def sink_names(self) -> set[str]:
        """The sinks this checkpoint holds pending transactions of."""
        return {s.sink for s in self.sinks if s.pending}

    def to_bytes(self) -> bytes:
        """Compact UTF-8 JSON, as ``_metadata`` holds it (storage adds its own header)."""
        try:
            return json.dumps(self.to_json(), separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"checkpoint {self.checkpoint_id} holds a value JSON cannot "
                                f"carry: {exc}") from exc

    @classmethod
    def from_bytes(cls, body: bytes) -> CheckpointMetadata:
        """Parse ``_metadata`` (without storage's header); raises :class:`MetadataError`."""
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise MetadataError(f"metadata is not valid JSON: {exc}") from None
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: Json) -> CheckpointMetadata:
        """Any version this runtime reads; raises :class:`MetadataError` naming the problem."""
        fields = _Fields(data, where="checkpoint metadata")
        version = fields.value("version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise MetadataError(f"checkpoint metadata format version {version!r} is not "
                                f"supported (this runtime reads versions "
                                f"{', '.join(map(str, READABLE_VERSIONS))})")
        return cls._read(fields, version=version)

    @classmethod
    def _read(cls, fields: _Fields, *, version: int) -> CheckpointMetadata:
        """Versions 1 and 2 share one layout; 2 may add ``shared`` to keyed handles."""
        sources = {_index(key, what="source split"): position
                   for key, position in fields.object("sources").items()}
        operators = {
            uid: tuple(KeyedStateHandle.from_json(
                fields.child(item, where=f"a state handle of operator {uid!r}"), version=version)
                for item in _list(handles, where=f"the handles of operator {uid!r}"))
            for uid, handles in fields.object("operators").items()}
        channels = {
            _index(stage, what="stage"): tuple(ChannelStateHandle.from_json(
                fields.child(item, where=f"a channel state handle of stage {stage}"))
                for item in _list(handles, where=f"the channel state of stage {stage}"))
            for stage, handles in fields.object("channels").items()}
        sinks = _sinks(fields, version=version)
        described = fields.value("pipeline") if version >= 4 else None
        pipeline = None if described is None else tuple(
            OperatorDescriptor.from_json(fields.child(item, where="an operator descriptor"))
            for item in _list(described, where="the pipeline"))
        origin = fields.value("snapshot") if version >= 4 else None
        snapshot = None if origin is None else SnapshotOrigin.from_json(
            fields.child(origin, where="the snapshot's origin"))
        return cls(job=fields.text("job"), checkpoint_id=fields.integer("checkpointId"),
                   timestamp=fields.number("timestamp"), final=fields.flag("final"),
                   attempt=fields.integer("attempt"), parallelism=fields.integer("parallelism"),
                   max_parallelism=fields.integer("maxParallelism"), sources=sources,
                   operators=operators, channels=channels, sinks=sinks, pipeline=pipeline,
                   snapshot=snapshot)


def _sinks(fields: _Fields, *, version: int) -> tuple[SinkTransactions, ...]:
    """Versions 1 and 2: ``{subtask: pending}`` of the one sink; 3: per sink name."""
    if version < 3:
        return tuple(SinkTransactions(subtask=_index(key, what="sink subtask"), pending=pending)
                     for key, pending in fields.object("sinks").items())
    found: list[SinkTransactions] = []
    for name, per_subtask in fields.object("sinks").items():
        if not isinstance(per_subtask, dict):
            raise MetadataError(f"the transactions of sink {name!r} must be an object, got "
                                f"{type(per_subtask).__name__}")
        for key, pending in per_subtask.items():
            found.append(SinkTransactions(sink=name, subtask=_index(key, what="sink subtask"),
                                          pending=pending))
    return tuple(found)


def _list(value: Json, *, where: str) -> list[Json]:
    if not isinstance(value, list):
        raise MetadataError(f"{where} must be a list, got {type(value).__name__}")
    return value
