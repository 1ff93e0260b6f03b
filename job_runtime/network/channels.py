"""Input gates and output channels with credit-based flow control.

A receiver announces how many buffers it can hold (its credit). A sender sends a
data buffer only while it holds credit, and the receiver gives one credit back
each time its task consumes a buffer. A task that does not consume a channel
(because it is aligning barriers, or because it is slow) therefore stops its
senders after a bounded number of buffers: this is backpressure, and it bounds
memory. Events (barriers, cancel markers, end of partition) need no credit.

A channel to the same process skips the socket but keeps the same credit rules.
A channel over a socket first authenticates both ends with the attempt's key
(:mod:`job_runtime.network.handshake`) and tags every frame.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from job_runtime.network.admission import MAX_UNAUTHENTICATED, HandshakeSlots
from job_runtime.network.framing import (
    DATA_KINDS,
    ChannelClosed,
    ChannelHello,
    Kind,
    decode_batch,
    encode_batch,
    recv_frame,
    send_frame,
)
from job_runtime.network.handshake import (
    HANDSHAKE_TIMEOUT,
    HandshakeFailed,
    Purpose,
    Session,
    client_handshake,
    server_handshake,
)
from job_runtime.rate_limited_log import RateLimitedLog
from job_runtime.records import Batch

log = logging.getLogger(__name__)

DEFAULT_CREDITS = 4

Item = tuple[Kind, int, Any]
"""(kind, argument, payload): payload is a :class:`Batch` for data, else ``None``."""


class InputGate:
    """The inputs of one task: one FIFO per upstream channel, read by the task thread."""

    def __init__(self, *, channels: int, priority_barriers: bool = False) -> None:
        self.size = channels
        self._queues: list[collections.deque[Item]] = [collections.deque() for _ in range(channels)]
        self._credit_back: list[Callable[[int], None] | None] = [None] * channels
        self._cond = threading.Condition()
        self._next = 0
        self._priority_barriers = priority_barriers
        self.priority: collections.deque[tuple[int, int]] = collections.deque()
        self._failure: BaseException | None = None

    def attach(self, channel: int, credit_back: Callable[[int], None]) -> None:
        self._credit_back[channel] = credit_back

    def deliver(self, channel: int, item: Item) -> None:
        with self._cond:
            self._queues[channel].append(item)
            if self._priority_barriers and item[0] == Kind.BARRIER:
                self.priority.append((channel, item[1]))
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self._cond:
            self._failure = exc
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def next(self, *, blocked: set[int] | frozenset[int], timeout: float) -> tuple[int, Item] | None:
        """The next item of an unblocked channel, round robin, or ``None`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._failure is not None:
                    raise self._failure
                if self.priority:
                    return None
                n = self.size
                for step in range(n):
                    c = (self._next + step) % n
                    if c in blocked or not self._queues[c]:
                        continue
                    item = self._queues[c].popleft()
                    self._next = (c + 1) % n
                    break
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    self._cond.wait(remaining)
                    continue
                break
        if item[0] in DATA_KINDS:
            credit_back = self._credit_back[c]
            if credit_back is not None:
                credit_back(1)
        return c, item

    def take_priority_barrier(self) -> tuple[int, int, list[Batch]] | None:
        """Pull the oldest overtaking barrier out of its FIFO with the data queued before it."""
        with self._cond:
            if not self.priority:
                return None
            channel, checkpoint_id = self.priority.popleft()
            queue = self._queues[channel]
            ahead: list[Batch] = []
            for i, item in enumerate(queue):
                if item[0] == Kind.BARRIER and item[1] == checkpoint_id:
                    del queue[i]
                    break
                if item[0] in DATA_KINDS:
                    ahead.append(item[2])
            return channel, checkpoint_id, ahead

    def queued(self, channel: int) -> int:
        with self._cond:
            return len(self._queues[channel])


class OutputChannel:
    """The sending end of one channel; ``send`` blocks while the receiver has no room."""

    def __init__(self, *, credits: int = 0) -> None:
        self._credits = credits
        self._cond = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self.blocked_seconds = 0.0

    def add_credit(self, n: int) -> None:
        with self._cond:
            self._credits += n
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self._cond:
            self._error = exc
            self._cond.notify_all()

    def _acquire(self, cancelled: Callable[[], bool]) -> None:
        with self._cond:
            if self._credits > 0 and self._error is None:
                self._credits -= 1
                return
            started = time.monotonic()
            while self._credits <= 0:
                if self._error is not None:
                    raise self._error
                if cancelled():
                    raise ChannelClosed("task cancelled while waiting for credit")
                self._cond.wait(0.1)
            self._credits -= 1
            self.blocked_seconds += time.monotonic() - started

    def send_batch(self, batch: Batch, *, cancelled: Callable[[], bool] = lambda: False) -> None:
        self._acquire(cancelled)
        self._send_data(batch)

    def send_event(self, kind: Kind, arg: int) -> None:
        raise NotImplementedError

    def _send_data(self, batch: Batch) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closed = True


class LocalOutputChannel(OutputChannel):
    """A channel to a task in the same process: objects are handed over, not encoded."""

    def __init__(self, *, gate: InputGate, channel: int, credits: int = DEFAULT_CREDITS) -> None:
        super().__init__(credits=credits)
        self._gate = gate
        self._channel = channel
        gate.attach(channel, self.add_credit)

    def _send_data(self, batch: Batch) -> None:
        self._gate.deliver(self._channel, (Kind.ARROW, 0, batch))

    def send_event(self, kind: Kind, arg: int) -> None:
        self._gate.deliver(self._channel, (kind, arg, None))


class TcpOutputChannel(OutputChannel):
    """A channel over a socket; a reader thread collects the receiver's credits."""

    def __init__(self, *, address: tuple[str, int], hello: ChannelHello, key: bytes,
                 connect_timeout: float = 60.0) -> None:
        super().__init__(credits=0)
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                self._sock = socket.create_connection(address, timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._session = client_handshake(self._sock, key=key, purpose=Purpose.DATA)
        except HandshakeFailed as exc:
            self._sock.close()
            raise ChannelClosed(f"cannot authenticate with the receiver at {address}: "
                                f"{exc}") from exc
        self._sock.settimeout(None)
        self._send_lock = threading.Lock()
        send_frame(self._sock, Kind.HELLO, 0, hello.encode(), mac=self._session.outgoing)
        self._reader = threading.Thread(target=self._read_credits, daemon=True,
                                        name="credit-reader")
        self._reader.start()

    def _read_credits(self) -> None:
        try:
            while True:
                kind, arg, _ = recv_frame(self._sock, mac=self._session.incoming)
                if kind == Kind.CREDIT:
                    self.add_credit(arg)
        except (ChannelClosed, OSError) as exc:
            if not self._closed:
                self.fail(ChannelClosed(f"receiver went away: {exc}"))

    def _send_data(self, batch: Batch) -> None:
        kind, payload = encode_batch(batch)
        with self._send_lock:
            send_frame(self._sock, kind, 0, payload, mac=self._session.outgoing)

    def send_event(self, kind: Kind, arg: int) -> None:
        with self._send_lock:
            send_frame(self._sock, kind, arg, mac=self._session.outgoing)

    def close(self) -> None:
        super().close()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


def serve_input_channel(*, sock: socket.socket, session: Session, gate: InputGate,
                        channel: int, credits: int = DEFAULT_CREDITS) -> None:
    """Read one authenticated channel into ``gate`` until it closes (in its own thread)."""
    send_lock = threading.Lock()

    def give_credit(n: int) -> None:
        with send_lock:
            try:
                send_frame(sock, Kind.CREDIT, n, mac=session.outgoing)
            except OSError:
                pass

    gate.attach(channel, give_credit)
    give_credit(credits)
    try:
        while True:
            kind, arg, payload = recv_frame(sock, mac=session.incoming)
            if kind in DATA_KINDS:
                gate.deliver(channel, (kind, arg, decode_batch(kind, payload)))
            else:
                gate.deliver(channel, (kind, arg, None))
                if kind == Kind.END:
                    return
    except (ChannelClosed, OSError) as exc:
        gate.fail(ChannelClosed(f"upstream channel {channel} broke: {exc}"))


OnChannel = Callable[[socket.socket, Session, ChannelHello], None]


class ChannelListener:
    """Accepts the channels of one subtask's peers.

    Each connection must complete the handshake and send a well-formed greeting
    within ``handshake_timeout`` in all, in a thread of its own so a slow stranger
    holds up nobody; otherwise it is closed and counted. At most
    ``max_unauthenticated`` connections wait for that at once: a newcomer past them
    drops the oldest (:mod:`job_runtime.network.admission`), so strangers can neither
    pile up threads nor keep a genuine peer out. Failures are logged at a bounded
    rate, never a line each. Only then is a connection handed to ``on_channel``.
    """

    def __init__(self, *, sock: socket.socket, key: bytes, on_channel: OnChannel,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 max_unauthenticated: int = MAX_UNAUTHENTICATED) -> None:
        self._sock = sock
        self._key = key
        self._on_channel = on_channel
        self._handshake_timeout = handshake_timeout
        self._failures = RateLimitedLog(logger=log,
                                        what="channel listener rejected a connection")
        self.slots = HandshakeSlots(
            limit=max_unauthenticated,
            dropped=RateLimitedLog(logger=log, what="channel listener dropped a connection "
                                   "still in its handshake to make room"))
        self._stopped = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="channels")
        self._thread.start()

    @property
    def rejected(self) -> int:
        """Connections closed for failing the handshake or the greeting (dropped ones too)."""
        return self._failures.total

    def _accept(self) -> None:
        while not self._stopped:
            try:
                sock, peer = self._sock.accept()
            except OSError:
                return
            self.slots.admit(sock, peer=peer)
            threading.Thread(target=self._admit, args=(sock, peer), daemon=True,
                             name="channel-handshake").start()

    def _admit(self, sock: socket.socket, peer: object) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            started = time.monotonic()
            session = server_handshake(sock, key=self._key, purpose=Purpose.DATA,
                                       timeout=self._handshake_timeout)
            left = self._handshake_timeout - (time.monotonic() - started)
            if left <= 0:
                raise ChannelClosed("no greeting within the handshake's deadline")
            sock.settimeout(left)
            kind, _, payload = recv_frame(sock, mac=session.incoming)
            if kind != Kind.HELLO:
                raise ChannelClosed(f"a channel must start with a greeting, not {kind.name}")
            hello = ChannelHello.decode(payload)
            sock.settimeout(None)
        except (HandshakeFailed, ChannelClosed, OSError) as exc:
            self._failures.event(f"{peer}: {exc}")
            sock.close()
            return
        finally:
            self.slots.release(sock)
        self._on_channel(sock, session, hello)

    def stop(self) -> None:
        self._stopped = True
        try:
            self._sock.close()
        except OSError:
            pass
