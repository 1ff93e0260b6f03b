"""Channels between tasks: credit-based backpressure, events without credit, priority barriers.

A sender may have at most ``credits`` data buffers outstanding; the receiver
gives a credit back each time its task consumes one. These tests check that a
sender stops exactly there (in memory and over loopback TCP), resumes when the
receiver consumes, that events (barriers, end of partition) pass without credit,
and that an unaligned barrier can overtake the data queued before it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from job_runtime.network.channels import (
    ChannelListener,
    InputGate,
    LocalOutputChannel,
    OutputChannel,
    TcpOutputChannel,
    serve_input_channel,
)
from job_runtime.network.framing import ChannelClosed, ChannelHello, Kind
from job_runtime.network.handshake import Session
from job_runtime.records import Batch

WAIT = 30.0
"""Upper bound for things that must happen; never reached when the code works."""
KEY = b"k" * 32


def arrow_batch(*values: int) -> Batch:
    return Batch(arrow=pa.RecordBatch.from_pydict({"v": list(values)}))


def wait_until(condition: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.01)


class Sender(threading.Thread):
    """Sends ``count`` one-record batches and counts how many ``send_batch`` calls returned."""

    def __init__(self, channel: OutputChannel, count: int) -> None:
        super().__init__(daemon=True)
        self.channel = channel
        self.count = count
        self.sent = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            for i in range(self.count):
                self.channel.send_batch(arrow_batch(i), cancelled=self.stop.is_set)
                self.sent += 1
        except BaseException as exc:
            self.error = exc


def take(gate: InputGate) -> tuple[int, tuple[Kind, int, object]]:
    item = gate.next(blocked=frozenset(), timeout=WAIT)
    assert item is not None, "the gate delivered nothing"
    return item


def still_blocked(sender: Sender, sent: int) -> bool:
    """The sender stays at ``sent`` buffers: it had time to go on and did not."""
    sender.join(timeout=0.3)
    return sender.is_alive() and sender.sent == sent


# --------------------------------------------------------------------------- in process


class TestLocalChannel:
    def test_a_sender_stops_once_its_credits_are_used_and_resumes_on_consumption(self) -> None:
        gate = InputGate(channels=1)
        channel = LocalOutputChannel(gate=gate, channel=0, credits=2)
        sender = Sender(channel, count=5)
        sender.start()

        wait_until(lambda: sender.sent == 2, what="two buffers are sent")
        assert still_blocked(sender, 2)
        assert gate.queued(0) == 2

        assert take(gate)[1][2].rows == [{"v": 0}]
        wait_until(lambda: sender.sent == 3, what="the consumed buffer's credit comes back")
        assert still_blocked(sender, 3)

        received = [take(gate)[1][2].rows[0]["v"] for _ in range(4)]
        sender.join(timeout=WAIT)
        assert received == [1, 2, 3, 4]
        assert sender.error is None and sender.sent == 5

    def test_barriers_and_end_of_partition_need_no_credit(self) -> None:
        gate = InputGate(channels=1)
        channel = LocalOutputChannel(gate=gate, channel=0, credits=1)
        channel.send_batch(arrow_batch(1))
        # No credit is left, yet events go through at once and keep their order.
        channel.send_event(Kind.BARRIER, 7)
        channel.send_event(Kind.END, 0)
        kinds = [take(gate)[1][:2] for _ in range(3)]
        assert kinds == [(Kind.ARROW, 0), (Kind.BARRIER, 7), (Kind.END, 0)]

    def test_a_cancelled_task_stops_waiting_for_credit(self) -> None:
        gate = InputGate(channels=1)
        channel = LocalOutputChannel(gate=gate, channel=0, credits=1)
        sender = Sender(channel, count=3)
        sender.start()
        wait_until(lambda: sender.sent == 1, what="one buffer is sent")
        sender.stop.set()
        sender.join(timeout=WAIT)
        assert not sender.is_alive()
        assert isinstance(sender.error, ChannelClosed)

    def test_a_blocked_channel_is_skipped_while_others_are_read(self) -> None:
        gate = InputGate(channels=2)
        left = LocalOutputChannel(gate=gate, channel=0)
        right = LocalOutputChannel(gate=gate, channel=1)
        left.send_batch(arrow_batch(1))
        right.send_batch(arrow_batch(2))
        left.send_batch(arrow_batch(3))
        item = gate.next(blocked={0}, timeout=WAIT)
        assert item is not None and item[0] == 1
        assert gate.next(blocked={0}, timeout=0.05) is None
        assert gate.queued(0) == 2

    def test_a_priority_barrier_overtakes_the_queued_data(self) -> None:
        gate = InputGate(channels=2, priority_barriers=True)
        channel = LocalOutputChannel(gate=gate, channel=1, credits=8)
        channel.send_batch(arrow_batch(1))
        channel.send_batch(arrow_batch(2))
        channel.send_event(Kind.BARRIER, 4)
        channel.send_batch(arrow_batch(3))

        # While a barrier waits to overtake, the gate hands out no data.
        assert gate.next(blocked=frozenset(), timeout=0.05) is None
        taken = gate.take_priority_barrier()
        assert taken is not None
        sender, checkpoint_id, ahead = taken
        assert (sender, checkpoint_id) == (1, 4)
        assert [b.rows[0]["v"] for b in ahead] == [1, 2]
        assert gate.take_priority_barrier() is None

        # The overtaken data stays in the channel, in order, without the barrier.
        rest = [take(gate)[1] for _ in range(3)]
        assert [(kind, payload.rows[0]["v"]) for kind, _, payload in rest] == [
            (Kind.ARROW, 1), (Kind.ARROW, 2), (Kind.ARROW, 3)]

    def test_without_priority_barriers_a_barrier_waits_its_turn(self) -> None:
        gate = InputGate(channels=1)
        channel = LocalOutputChannel(gate=gate, channel=0)
        channel.send_batch(arrow_batch(1))
        channel.send_event(Kind.BARRIER, 1)
        assert gate.take_priority_barrier() is None
        assert take(gate)[1][0] == Kind.ARROW
        assert take(gate)[1][:2] == (Kind.BARRIER, 1)

    def test_a_failed_gate_wakes_the_reading_task(self) -> None:
        gate = InputGate(channels=1)
        failure = ChannelClosed("upstream went away")
        threading.Timer(0.1, gate.fail, args=(failure,)).start()
        with pytest.raises(ChannelClosed):
            gate.next(blocked=frozenset(), timeout=WAIT)


# --------------------------------------------------------------------------- over TCP


@contextlib.contextmanager
def tcp_channel(*, credits: int, channel: int = 0,
                channels: int = 1) -> Iterator[tuple[TcpOutputChannel, InputGate]]:
    """A real loopback connection: sender -> socket -> ``serve_input_channel`` -> gate."""
    gate = InputGate(channels=channels)
    listener_sock = socket.create_server(("127.0.0.1", 0))
    served: dict[str, socket.socket] = {}
    server = threading.Thread()

    def on_channel(sock: socket.socket, session: Session, hello: ChannelHello) -> None:
        nonlocal server
        assert hello == ChannelHello(stage=1, sender=channel)
        served["sock"] = sock
        server = threading.Thread(target=serve_input_channel, daemon=True, kwargs={
            "sock": sock, "session": session, "gate": gate, "channel": channel,
            "credits": credits})
        server.start()

    listener = ChannelListener(sock=listener_sock, key=KEY, on_channel=on_channel)
    sender = TcpOutputChannel(address=listener_sock.getsockname()[:2],
                              hello=ChannelHello(stage=1, sender=channel), key=KEY)
    try:
        yield sender, gate
    finally:
        sender.close()
        listener.stop()
        if "sock" in served:
            served["sock"].close()
        if server.is_alive():
            server.join(timeout=WAIT)


class TestTcpChannel:
    def test_a_sender_stops_once_its_credits_are_used_and_resumes_on_consumption(self) -> None:
        with tcp_channel(credits=3) as (channel, gate):
            sender = Sender(channel, count=8)
            sender.start()
            wait_until(lambda: sender.sent == 3, what="three buffers are sent")
            assert still_blocked(sender, 3)
            wait_until(lambda: gate.queued(0) == 3, what="three buffers arrive")

            first = take(gate)
            assert first[1][2].rows == [{"v": 0}]
            wait_until(lambda: sender.sent == 4, what="the credit travels back")
            assert still_blocked(sender, 4)

            received = [take(gate)[1][2].rows[0]["v"] for _ in range(7)]
            sender.join(timeout=WAIT)
            assert received == [1, 2, 3, 4, 5, 6, 7]
            assert sender.error is None

    def test_batches_barriers_and_the_end_arrive_intact_and_in_order(self) -> None:
        with tcp_channel(credits=1, channel=1, channels=2) as (channel, gate):
            table = pa.RecordBatch.from_pydict({"k": ["a", "b"], "n": [1.5, 2.5]})
            channel.send_batch(Batch(arrow=table))
            channel.send_event(Kind.BARRIER, 9)       # no credit left: events still pass
            channel.send_event(Kind.CANCEL, 8)
            received = [take(gate) for _ in range(3)]
            assert all(c == 1 for c, _ in received)
            kind, _, payload = received[0][1]
            assert kind == Kind.ARROW
            assert payload.arrow.equals(table)
            assert [item[:2] for _, item in received[1:]] == [(Kind.BARRIER, 9),
                                                              (Kind.CANCEL, 8)]
            # Row batches (what record functions produce) travel too.
            channel.send_batch(Batch(rows=[{"x": 1, "nested": {"y": [1, 2]}}]))
            channel.send_event(Kind.END, 0)
            kind, _, payload = take(gate)[1]
            assert kind == Kind.ROWS
            assert payload.rows == [{"x": 1, "nested": {"y": [1, 2]}}]
            assert take(gate)[1][0] == Kind.END

    def test_a_sender_waiting_for_credit_fails_when_the_receiver_goes_away(self) -> None:
        gate = InputGate(channels=1)
        listener_sock = socket.create_server(("127.0.0.1", 0))
        accepted: dict[str, socket.socket] = {}

        def on_channel(sock: socket.socket, session: Session, hello: ChannelHello) -> None:
            accepted["sock"] = sock
            serve_input_channel(sock=sock, session=session, gate=gate, channel=0, credits=1)

        listener = ChannelListener(sock=listener_sock, key=KEY, on_channel=on_channel)
        channel = TcpOutputChannel(address=listener_sock.getsockname()[:2],
                                   hello=ChannelHello(stage=1, sender=0), key=KEY)
        try:
            sender = Sender(channel, count=5)
            sender.start()
            wait_until(lambda: sender.sent == 1, what="one buffer is sent")
            assert still_blocked(sender, 1)
            accepted["sock"].shutdown(socket.SHUT_RDWR)
            accepted["sock"].close()
            sender.join(timeout=WAIT)
            assert not sender.is_alive(), "the sender hangs on a dead receiver"
            assert isinstance(sender.error, ChannelClosed)
        finally:
            channel.close()
            listener.stop()

    def test_the_receiving_task_learns_that_its_upstream_broke(self) -> None:
        with tcp_channel(credits=2) as (channel, gate):
            channel.send_batch(arrow_batch(1))
            assert take(gate)[1][0] == Kind.ARROW
            channel.close()  # the sender dies without sending END
            with pytest.raises(ChannelClosed, match="upstream channel 0 broke"):
                gate.next(blocked=frozenset(), timeout=WAIT)
