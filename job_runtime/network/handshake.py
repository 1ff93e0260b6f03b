"""Mutual authentication of every connection between the parts of one job attempt.

The driver makes a random key per attempt and ships it to the subtasks inside
the Spark task closure; nobody else has it. Every coordinator connection and
every data channel starts with a challenge-response exchange over fresh nonces
from both ends, so neither side reads a single length prefix or payload from a
peer that has not proven it knows the key, and a recorded exchange is worthless
on another connection (the other side's nonce differs).

Wire (all fixed sizes, so nothing is allocated on a stranger's say-so)::

    client -> server   MAGIC(8) VERSION(1) PURPOSE(1) client_nonce(32)
    server -> client   server_nonce(32) server_proof(32)
    client -> server   client_proof(32)

``proof = HMAC-SHA256(key, label | role | purpose | client_nonce | server_nonce)``.
Each direction then gets its own frame key derived the same way, which
:class:`FrameMac` uses to tag every frame with a sequence number, so a frame can
be neither forged, altered, replayed nor reordered within the connection.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import hmac
import secrets
import socket
import time

MAGIC = b"CJOBAUTH"
VERSION = 1
KEY_BYTES = 32
NONCE_BYTES = 32
TAG_BYTES = 32
HANDSHAKE_TIMEOUT = 10.0
"""Seconds a peer has for the whole handshake, however it spreads its bytes.

A deadline for the whole exchange, not for each read: a peer that dribbles one byte
at a time would otherwise hold a listener's thread for minutes. A genuine peer needs
a few milliseconds; ten seconds leaves room for a starved executor (a long garbage
collection of its JVM, a node short of CPU) without failing a subtask. It is generous
because it is cheap: the listeners cap the connections still in their handshake
(:mod:`job_runtime.network.admission`) and drop the oldest for a newcomer, so it only
bounds how long a stranger keeps its place, never how long a genuine peer waits."""

_LABEL = b"checkpointed-jobs/handshake/v1"


class Purpose(enum.IntEnum):
    """What the connection carries; a proof for one purpose is useless for the other."""

    CONTROL = 1
    DATA = 2


class HandshakeFailed(Exception):
    """The peer did not prove it holds this attempt's key (or spoke something else)."""


class FrameRejected(Exception):
    """A frame's tag did not match: it was forged, altered, replayed or reordered."""


def new_key() -> bytes:
    """A fresh per-attempt key."""
    return secrets.token_bytes(KEY_BYTES)


class FrameMac:
    """Tags (or checks) the frames of one direction of one connection, in order.

    Not thread-safe: each user already serialises its sends (a send lock) and has
    a single reading thread.
    """

    def __init__(self, *, key: bytes) -> None:
        self._key = key
        self._sequence = 0

    def _digest(self, parts: tuple[bytes, ...]) -> bytes:
        # One-shot ``hmac.digest`` runs in OpenSSL without a Python HMAC object: for
        # a channel's frames it is about half the cost of ``hmac.new`` + updates,
        # far more than the copy the join makes.
        message = b"".join((self._sequence.to_bytes(8, "big"), *parts))
        self._sequence += 1
        return hmac.digest(self._key, message, "sha256")

    def tag(self, *parts: bytes) -> bytes:
        return self._digest(parts)

    def check(self, tag: bytes, *parts: bytes) -> None:
        if not hmac.compare_digest(tag, self._digest(parts)):
            raise FrameRejected("a frame failed its authentication check")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Session:
    """The frame keys of an authenticated connection: one per direction."""

    outgoing: FrameMac
    incoming: FrameMac


def _derive(key: bytes, what: bytes, purpose: Purpose, client_nonce: bytes,
            server_nonce: bytes) -> bytes:
    message = b"|".join([_LABEL, what, bytes([purpose]), client_nonce, server_nonce])
    return hmac.new(key, message, hashlib.sha256).digest()


class _Deadline:
    """The end of a handshake: every read and write may take only what is left of it."""

    def __init__(self, *, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def arm(self, sock: socket.socket) -> None:
        """Give ``sock``'s next call the time left; raises ``TimeoutError`` if none is."""
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out: the handshake did not complete within its deadline")
        sock.settimeout(left)


def _recv_exact(sock: socket.socket, n: int, deadline: _Deadline) -> bytes:
    parts = []
    while n:
        deadline.arm(sock)
        chunk = sock.recv(n)
        if not chunk:
            raise HandshakeFailed("the peer closed the connection during the handshake")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _session(key: bytes, purpose: Purpose, client_nonce: bytes, server_nonce: bytes, *,
             client: bool) -> Session:
    to_server = FrameMac(key=_derive(key, b"frames-to-server", purpose, client_nonce,
                                     server_nonce))
    to_client = FrameMac(key=_derive(key, b"frames-to-client", purpose, client_nonce,
                                     server_nonce))
    if client:
        return Session(outgoing=to_server, incoming=to_client)
    return Session(outgoing=to_client, incoming=to_server)


def _send_all(sock: socket.socket, data: bytes, deadline: _Deadline) -> None:
    deadline.arm(sock)  # a socket's timeout bounds a whole ``sendall``
    sock.sendall(data)


def client_handshake(sock: socket.socket, *, key: bytes, purpose: Purpose,
                     timeout: float = HANDSHAKE_TIMEOUT) -> Session:
    """Authenticate the server and to the server, all within ``timeout``; raises
    :class:`HandshakeFailed`."""
    previous = sock.gettimeout()
    deadline = _Deadline(seconds=timeout)
    try:
        client_nonce = secrets.token_bytes(NONCE_BYTES)
        _send_all(sock, MAGIC + bytes([VERSION, purpose]) + client_nonce, deadline)
        answer = _recv_exact(sock, NONCE_BYTES + TAG_BYTES, deadline)
        server_nonce, server_proof = answer[:NONCE_BYTES], answer[NONCE_BYTES:]
        expected = _derive(key, b"server", purpose, client_nonce, server_nonce)
        if not hmac.compare_digest(server_proof, expected):
            raise HandshakeFailed("the server does not hold this job attempt's key")
        _send_all(sock, _derive(key, b"client", purpose, client_nonce, server_nonce),
                  deadline)
    except (TimeoutError, OSError) as exc:
        raise HandshakeFailed(f"handshake with the server failed: {exc}") from exc
    finally:
        sock.settimeout(previous)
    return _session(key, purpose, client_nonce, server_nonce, client=True)


def server_handshake(sock: socket.socket, *, key: bytes, purpose: Purpose,
                     timeout: float = HANDSHAKE_TIMEOUT) -> Session:
    """Authenticate a client that just connected; raises :class:`HandshakeFailed`.

    Reads at most 74 bytes from the stranger, within ``timeout`` in all: a monotonic
    deadline, each read and write given only the time left of it, so a peer sending a
    byte now and then is dropped when it passes, not after a timeout per byte.
    """
    previous = sock.gettimeout()
    deadline = _Deadline(seconds=timeout)
    try:
        magic = _recv_exact(sock, len(MAGIC), deadline)
        if magic != MAGIC:
            raise HandshakeFailed("the peer does not speak the job's protocol")
        version, wanted = _recv_exact(sock, 2, deadline)
        if version != VERSION:
            raise HandshakeFailed(f"the peer speaks handshake version {version}, "
                                  f"this runtime speaks {VERSION}")
        if wanted != purpose:
            raise HandshakeFailed(f"the peer wants purpose {wanted}, this endpoint serves "
                                  f"{purpose.name.lower()}")
        client_nonce = _recv_exact(sock, NONCE_BYTES, deadline)
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        _send_all(sock, server_nonce + _derive(key, b"server", purpose, client_nonce,
                                               server_nonce), deadline)
        proof = _recv_exact(sock, TAG_BYTES, deadline)
        if not hmac.compare_digest(proof, _derive(key, b"client", purpose, client_nonce,
                                                  server_nonce)):
            raise HandshakeFailed("the peer does not hold this job attempt's key")
    except (TimeoutError, OSError) as exc:
        raise HandshakeFailed(f"handshake failed: {exc}") from exc
    finally:
        sock.settimeout(previous)
    return _session(key, purpose, client_nonce, server_nonce, client=False)
