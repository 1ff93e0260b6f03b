"""How a standby driver learns, in milliseconds, that the active driver is gone.

On a real node the kubelet notices a dead driver container on its next relist (about
once a second), then reports it, and only then may the operator promote the standby.
A driver's connections close the moment its process dies, whatever killed it, so a
standby holding one connection to the active driver hears of a crash first:

1. The active driver listens on a *beacon* port and records where
   (:data:`BEACON_ANNOTATION` on the checkpoint ConfigMap: a :class:`BeaconAddress`).
2. The standby connects, sends the address's ``token`` (a line of its own, which
   lets it in ahead of any number of strangers holding connections) and reads
   :class:`BeaconMessage` lines: ``hello`` names the attempt; ``bye`` is sent when the driver ends in an orderly way (finished, failed
   with an exit code), which the kubelet reports with its exit code, as before.
3. A connection that closes without ``bye`` is a driver that died (killed, out of
   memory, crashed), or one that stopped answering TCP keepalives (its node is gone).
   The standby records :class:`DriverLost` on the same ConfigMap
   (:data:`DRIVER_LOST_ANNOTATION`, naming itself), whose every change wakes the
   operator; the driver's Role already lets it patch that ConfigMap.

A SIGTERM ends a driver at once, without ``bye``: it comes from a deletion of the pod,
which the operator sees itself (a report of an attempt it already ended is ignored).

A report is a claim, not a proof: a network fault could close the connection of a
driver that still runs. The operator acts on it only when the standby is to take over
anyway (a restart the policy allows), and it advances the store's fence first, so the
old driver can no longer commit a checkpoint. The old pod is left to end by itself
(its logs and exit code are kept) and deleted only if it still runs after a grace
period. A false report costs one recovery, never data.

Every structure crosses a process boundary and carries a format ``version``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from cjob_spec.versioned import versioned_body

FORMAT_VERSION = 1
BEACON_ANNOTATION = "checkpointed.io/driver-beacon"
"""The checkpoint ConfigMap's annotation: where the active driver's beacon listens."""
DRIVER_LOST_ANNOTATION = "checkpointed.io/driver-lost"
"""The checkpoint ConfigMap's annotation: a standby's report that the active driver is gone."""
MAX_UNIX_SECONDS = 253_402_300_799
"""The last second of the year 9999: the latest time a report may carry (the operator
turns it into a datetime, which ends there)."""
MAX_LINE_BYTES = 256
"""The longest beacon message a reader accepts; anything longer is not a beacon."""
MAX_TOKEN_CHARS = 128
"""The longest token an address may carry (the beacon makes 32 hexadecimal digits)."""


class BeaconSignalError(ValueError):
    """A beacon address, message or loss report that cannot be read; the message says why."""


def _attempt(body: dict[str, Any], *, what: str) -> int:
    attempt = body.get("attempt")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise BeaconSignalError(f"{what}: attempt must be a number >= 1, got {attempt!r}")
    return attempt


def _decode(text: str | bytes, *, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BeaconSignalError(f"{what}: not valid JSON: {exc}") from None
    return versioned_body(data, what=what, version=FORMAT_VERSION, error=BeaconSignalError)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BeaconAddress:
    """The beacon of the driver of ``attempt`` listens at ``host``:``port``.

    ``token`` is what a standby sends first to be told from a stranger: only those who
    may read the checkpoint ConfigMap (the job's drivers, the operator) know it. It is
    no key to anything else, and optional: an address without one (recorded by an
    earlier release) is watched as before, without it.
    """

    attempt: int
    host: str
    port: int
    token: str | None = None

    def encode(self) -> str:
        body: dict[str, Any] = {"version": FORMAT_VERSION, "attempt": self.attempt,
                                "host": self.host, "port": self.port}
        if self.token is not None:
            body["token"] = self.token
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> BeaconAddress:
        body = _decode(text, what="beacon address")
        host, port = body.get("host"), body.get("port")
        if not isinstance(host, str) or not host or len(host) > 253:
            raise BeaconSignalError(f"beacon address: host must be a host name or address, "
                                    f"got {host!r}")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise BeaconSignalError(f"beacon address: port must be within 1..65535, "
                                    f"got {port!r}")
        token = body.get("token")
        if token is not None and (not isinstance(token, str) or not token
                                  or len(token) > MAX_TOKEN_CHARS
                                  or not token.isascii() or not token.isalnum()):
            raise BeaconSignalError(f"beacon address: token must be up to {MAX_TOKEN_CHARS} "
                                    f"letters and digits")
        return cls(attempt=_attempt(body, what="beacon address"), host=host, port=port,
                   token=token)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BeaconMessage:
    """One line on a beacon connection: ``hello`` when it opens, ``bye`` before an
    orderly end of the driver of ``attempt``."""

    kind: Literal["hello", "bye"]
    attempt: int

    def encode(self) -> bytes:
        return json.dumps({"version": FORMAT_VERSION, "kind": self.kind,
                           "attempt": self.attempt}, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> BeaconMessage:
        if len(line) > MAX_LINE_BYTES:
            raise BeaconSignalError(f"beacon message: longer than {MAX_LINE_BYTES} bytes")
        body = _decode(line, what="beacon message")
        kind = body.get("kind")
        if kind == "hello":
            return cls(kind="hello", attempt=_attempt(body, what="beacon message"))
        if kind == "bye":
            return cls(kind="bye", attempt=_attempt(body, what="beacon message"))
        raise BeaconSignalError(f"beacon message: kind must be hello or bye, got {kind!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverLost:
    """The standby pod ``pod`` lost its beacon connection to the driver of ``attempt``
    without ``bye`` at ``at`` (Unix seconds); ``detail`` says how, for the Event."""

    attempt: int
    pod: str
    at: float
    detail: str

    def encode(self) -> str:
        return json.dumps({"version": FORMAT_VERSION, "attempt": self.attempt, "pod": self.pod,
                           "at": self.at, "detail": self.detail}, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> DriverLost:
        body = _decode(text, what="driver-lost report")
        pod, at, detail = body.get("pod"), body.get("at"), body.get("detail")
        if not isinstance(pod, str) or not pod or len(pod) > 253:
            raise BeaconSignalError(f"driver-lost report: pod must be a pod name, got {pod!r}")
        if (not isinstance(at, int | float) or isinstance(at, bool)
                or not 0 <= at <= MAX_UNIX_SECONDS):
            raise BeaconSignalError(f"driver-lost report: at must be a time in Unix seconds, "
                                    f"got {at!r}")
        if not isinstance(detail, str):
            raise BeaconSignalError(f"driver-lost report: detail must be a string, "
                                    f"got {detail!r}")
        return cls(attempt=_attempt(body, what="driver-lost report"), pod=pod, at=float(at),
                   detail=detail[:200])
