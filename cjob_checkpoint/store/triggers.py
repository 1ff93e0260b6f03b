"""Manual checkpoint requests that reach a running driver through its store.

A supervisor asks for a checkpoint by writing a *nonce* next to the store (a
file for the file store, an annotation of the ConfigMap for the ConfigMap
store); the coordinator polls for a nonce it has not served yet, triggers a
checkpoint, and once that checkpoint completes writes ``<nonce>:<checkpoint id>``
back as the acknowledgement. Going through the store needs no network path from
the operator to the driver and no permission the driver does not already have.

A suspend is a request of its own kind, told apart by its nonce
(:func:`cjob_spec.names.suspend_nonce`): the driver of the attempt it names takes it
as its final checkpoint, lets every sink commit it, and ends (see ``docs/status.md``).
"""

from __future__ import annotations

import abc
import os

from cjob_checkpoint.storage.local import write_file_atomically

TRIGGER_FILE = "trigger"
TRIGGER_ACK_FILE = "trigger.ack"


class TriggerSource(abc.ABC):
    @abc.abstractmethod
    def requested(self) -> str | None:
        """The nonce of the newest request, if any (served or not)."""

    @abc.abstractmethod
    def acknowledged(self) -> str | None:
        """The nonce of the newest request that was served."""

    @abc.abstractmethod
    def acknowledge(self, *, nonce: str, checkpoint_id: int) -> None:
        """Record that ``checkpoint_id`` completed for the request ``nonce``."""

    def pending(self) -> str | None:
        nonce = self.requested()
        if nonce and nonce != self.acknowledged():
            return nonce
        return None


class FileTriggerSource(TriggerSource):
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _read(self, name: str) -> str | None:
        try:
            with open(os.path.join(self.directory, name)) as handle:
                text = handle.read().strip()
        except OSError:
            return None
        return text or None

    def requested(self) -> str | None:
        return self._read(TRIGGER_FILE)

    def acknowledged(self) -> str | None:
        ack = self._read(TRIGGER_ACK_FILE)
        return ack.rsplit(":", 1)[0] if ack else None

    def acknowledge(self, *, nonce: str, checkpoint_id: int) -> None:
        write_file_atomically(os.path.join(self.directory, TRIGGER_ACK_FILE),
                              f"{nonce}:{checkpoint_id}".encode())


def request_checkpoint(directory: str, *, nonce: str) -> None:
    """Ask the driver that uses the file store in ``directory`` for a checkpoint."""
    write_file_atomically(os.path.join(directory, TRIGGER_FILE), nonce.encode())
