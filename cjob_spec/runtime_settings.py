"""What a supervisor tells ``python -m job_runtime run``: one typed, versioned document.

The operator and the embedded runner both start drivers. They used to spell every
setting as a flag, which the runtime's argument parser read back into values: the
same settings changed form twice on their way and lost their types (a checkpoint
mode became the word ``exactly_once``). Now a supervisor builds a
:class:`RuntimeSettings` from the job and passes it whole, as JSON in one argument
(``--settings``); the runtime decodes it into the same typed values, or refuses it in
one line naming the field. The runtime's individual flags remain for a command line
written by hand (and the tests), and build the same document.

The document is versioned (:data:`SETTINGS_VERSION`): a runtime refuses a version it
does not know rather than guess, and a field it does not know (a newer supervisor's,
or a typo) rather than drop it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Mapping
from typing import Any

from cjob_spec import defaults
from cjob_spec.model import (
    DEFAULT_CHECKPOINT_MODE,
    DEFAULT_ON_UNREADABLE,
    DEFAULT_STATE_BACKEND,
    CheckpointMode,
    OnUnreadable,
    StateBackend,
)
from cjob_spec.versioned import versioned_body

SETTINGS_VERSION = 1
DEFAULT_LOCAL_MASTER = "local[*]"
ADDED_IN_VERSION_1 = frozenset({"restore_exact"})
"""Fields added to version 1 after it shipped: written only when they differ from their
default, so a document that does not use them still runs on a runtime that predates
them (which refuses fields it does not know)."""


class RuntimeSettingsError(ValueError):
    """A settings document the runtime cannot run (one line, naming the field)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RuntimeSettings:
    """The job's attempt as the runtime runs it (durations in seconds)."""

    job_name: str
    job_uid: str
    """Checkpoints live under ``<checkpoint_storage>/<job_name>-<job_uid>/``."""
    entrypoint: str
    """``module:function`` of the user's ``build(p: Pipeline)``."""
    checkpoint_storage: str
    """``file:///...`` or ``s3://bucket/prefix``."""
    python_path: tuple[str, ...] = ()
    """Added to ``sys.path`` on the driver and the executors, the first entry first: a
    directory on the driver, or an ``s3://bucket/key.zip`` archive."""
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """``spec.job.args``; the pipeline sees them as ``p.args``."""
    parallelism: int = defaults.PARALLELISM.default
    max_parallelism: int = defaults.MAX_PARALLELISM.default
    master: str = DEFAULT_LOCAL_MASTER
    spark_conf: Mapping[str, str] = dataclasses.field(default_factory=dict)
    checkpoint_interval: float = defaults.CHECKPOINT_INTERVAL.default_value().seconds
    checkpoint_min_pause: float = defaults.CHECKPOINT_MIN_PAUSE.default_value().seconds
    checkpoint_timeout: float = defaults.CHECKPOINT_TIMEOUT.default_value().seconds
    checkpoint_mode: CheckpointMode = DEFAULT_CHECKPOINT_MODE
    unaligned: bool = False
    retained: int = defaults.RETAINED.default
    tolerable_failures: int = defaults.TOLERABLE_FAILURES.default
    checkpoint_stall_intervals: int = defaults.CHECKPOINT_STALL_INTERVALS.default
    sink_stall_timeout: float = defaults.SINK_STALL_TIMEOUT.default_value().seconds
    restore: str = defaults.RESTORE_FROM.default
    """``latest``, a checkpoint id of this job, or a path to a ``_metadata`` file."""
    restore_exact: bool = False
    """A redeploy (``spec.restore.redeployNonce``): restore ``restore`` itself even when
    the store holds newer checkpoints, whose state the redeploy discards. Otherwise a
    named starting point older than the store's newest gives way to the newest."""
    on_unreadable: OnUnreadable = DEFAULT_ON_UNREADABLE
    allow_foreign_restore: bool = False
    allow_non_restored_state: bool = False
    state_backend: StateBackend = DEFAULT_STATE_BACKEND
    attempt: int = 1
    """The store refuses writes from any attempt but the fenced one."""
    store: str = "memory:"
    """``file:DIR`` or ``configmap:NAMESPACE/NAME``: the completed-checkpoint store."""
    metrics_port: int | None = None
    status_file: str | None = None

    def encode(self) -> str:
        """The document as JSON, enums as their values, keys in a stable order."""
        body: dict[str, Any] = {"version": SETTINGS_VERSION}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in ADDED_IN_VERSION_1 and value == field.default:
                continue
            if isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            body[field.name] = value
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> RuntimeSettings:
        """The document ``text`` holds; :class:`RuntimeSettingsError` when it is not one
        this runtime can run."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RuntimeSettingsError(f"runtime settings are not JSON: {exc}") from None
        body = dict(versioned_body(data, what="runtime settings", version=SETTINGS_VERSION,
                                   error=RuntimeSettingsError))
        del body["version"]
        return cls.from_fields(body)

    @classmethod
    def from_fields(cls, body: Mapping[str, Any]) -> RuntimeSettings:
        """The settings of the document's fields (without its version): each checked and
        converted to its type, unknown and missing ones refused. The runtime's flags,
        for a command line written by hand, are read through here too."""
        hints = typing.get_type_hints(cls)
        known = {field.name: field for field in dataclasses.fields(cls)}
        unknown = sorted(set(body) - set(known))
        if unknown:
            raise RuntimeSettingsError(f"runtime settings have unknown fields: "
                                       f"{', '.join(unknown)}")
        missing = sorted(name for name, field in known.items()
                         if name not in body and field.default is dataclasses.MISSING
                         and field.default_factory is dataclasses.MISSING)
        if missing:
            raise RuntimeSettingsError(f"runtime settings lack {', '.join(missing)}")
        return cls(**{name: _typed(name, hints[name], value) for name, value in body.items()})


def _typed(name: str, hint: Any, value: Any) -> Any:
    """``value`` as the field's type, or an error naming the field."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return None if value is None else _typed(name, options[0], value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(str(member.value) for member in hint)
            raise RuntimeSettingsError(f"runtime settings field {name}: {value!r} is not one "
                                       f"of {choices}") from None
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _wrong(name, value, "a list of strings")
        return tuple(value)
    if origin is Mapping or hint is Mapping:
        if not isinstance(value, dict):
            raise _wrong(name, value, "an object")
        if typing.get_args(hint)[1:] == (str,) and not all(
                isinstance(v, str) for v in value.values()):
            raise _wrong(name, value, "an object of strings")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong(name, value, "a number")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong(name, value, "an integer")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise _wrong(name, value, "true or false")
        return value
    if not isinstance(value, str):
        raise _wrong(name, value, "a string")
    return value


def _wrong(name: str, value: Any, expected: str) -> RuntimeSettingsError:
    return RuntimeSettingsError(f"runtime settings field {name} must be {expected}, "
                                f"got {value!r}")
