"""Where the completed-checkpoint store lives (``--store``), and opening it.

Three kinds exist: ``file:DIR`` (what ``cjob run`` passes), ``memory:`` (tests and
runs nothing will restore) and ``configmap:NAMESPACE/NAME`` (the operator's). The
flag is split once, into a :class:`StoreAddress`, when the driver's settings are
built; every role that needs the store, its manual checkpoint requests, or (a
standby, the beacon) its ConfigMap reads that value. An address of no known kind
is refused when the store is opened, as the first thing that needs one.
"""

from __future__ import annotations

import dataclasses
import enum
import os

from cjob_checkpoint.store.backed import BackedCheckpointStore
from cjob_checkpoint.store.completed_store import CheckpointIdCounter
from cjob_checkpoint.store.triggers import FileTriggerSource, TriggerSource
from job_runtime.errors import ConfigurationError


class StoreKind(enum.Enum):
    FILE = "file"
    MEMORY = "memory"
    CONFIGMAP = "configmap"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreAddress:
    """``--store KIND:WHERE``, split into its parts."""

    text: str
    """The flag as given, for messages."""
    kind: StoreKind | None
    """``None``: a kind no store has (refused when the store is opened)."""
    directory: str = ""
    """A file store's directory."""
    namespace: str = ""
    """A ConfigMap store's namespace, as given (it may be missing)."""
    name: str = ""
    """A ConfigMap store's name, as given (it may be missing)."""

    @classmethod
    def parse(cls, text: str) -> StoreAddress:
        kind_text, _, where = text.partition(":")
        kind = next((kind for kind in StoreKind if kind.value == kind_text), None)
        if kind is StoreKind.FILE:
            return cls(text=text, kind=kind, directory=where)
        if kind is StoreKind.CONFIGMAP:
            namespace, _, name = where.partition("/")
            return cls(text=text, kind=kind, namespace=namespace, name=name)
        return cls(text=text, kind=kind)

    def configmap(self, *, setting: str) -> tuple[str, str]:
        """The namespace and name of the ``configmap:NAMESPACE/NAME`` store that
        ``setting`` (a flag that works only with one) needs."""
        if self.kind is not StoreKind.CONFIGMAP or not self.namespace or not self.name:
            raise ConfigurationError(setting=setting,
                                     problem=f"needs a configmap:NAMESPACE/NAME store, "
                                             f"got --store {self.text!r}")
        return self.namespace, self.name


MEMORY_STORE = StoreAddress.parse("memory:")
"""The store of a driver that is told none: nothing outlives the process."""


def open_store(address: StoreAddress, *, retained: int,
               attempt: int) -> tuple[BackedCheckpointStore, CheckpointIdCounter]:
    """The completed-checkpoint store and the id counter at ``address``, fenced for
    ``attempt``, keeping ``retained`` checkpoints (the store also publishes staged
    inputs)."""
    match address.kind:
        case StoreKind.FILE:
            from cjob_checkpoint.store.file import FileCheckpointIdCounter, FileCheckpointStore

            os.makedirs(address.directory, exist_ok=True)
            return (FileCheckpointStore(address.directory, retained=retained, attempt=attempt),
                    FileCheckpointIdCounter(address.directory, attempt=attempt))
        case StoreKind.MEMORY:
            from cjob_checkpoint.store.memory import (
                InMemoryCheckpointIdCounter,
                InMemoryCheckpointStore,
            )

            return InMemoryCheckpointStore(retained=retained), InMemoryCheckpointIdCounter()
        case StoreKind.CONFIGMAP:
            from cjob_checkpoint.store.configmap import open_configmap_store

            return open_configmap_store(namespace=address.namespace, name=address.name,
                                        retained=retained, attempt=attempt)
    raise ConfigurationError(setting="--store",
                             problem=f"expected file:DIR, memory: or configmap:NS/NAME, "
                                     f"got {address.text!r}")


def open_triggers(address: StoreAddress) -> TriggerSource | None:
    """Where manual checkpoint requests for this driver arrive, if anywhere."""
    match address.kind:
        case StoreKind.FILE:
            return FileTriggerSource(address.directory)
        case StoreKind.CONFIGMAP:
            try:
                from cjob_checkpoint.store.configmap_triggers import open_configmap_triggers
            except ImportError:
                return None
            return open_configmap_triggers(namespace=address.namespace, name=address.name)
    return None
