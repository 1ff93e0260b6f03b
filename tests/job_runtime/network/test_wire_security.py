"""Strangers on the coordinator's and the channels' ports, over real loopback sockets.

Every connection must prove it holds the attempt's key before a single byte of
payload is read; a stranger is dropped (counted, logged once) and the endpoint
keeps serving the job's own peers.
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.store.memory import InMemoryCheckpointIdCounter, InMemoryCheckpointStore
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.coordinator.coordinator import CheckpointCoordinator
from job_runtime.coordinator.messages import (
    FORMAT_VERSION,
    ChannelAddress,
    Ready,
    Register,
    Registered,
)
from job_runtime.coordinator.rpc import ConnectionLost, SubtaskConnection, connect
from job_runtime.execution.driver.run import _driver_host
from job_runtime.execution.subtask.runtime import channel_addresses
from job_runtime.network.channels import (
    ChannelListener,
    InputGate,
    TcpOutputChannel,
    serve_input_channel,
)
from job_runtime.network.framing import HEADER, ChannelHello, Kind
from job_runtime.network.handshake import (
    HandshakeFailed,
    Purpose,
    Session,
    client_handshake,
    new_key,
    server_handshake,
)

WAIT = 30.0
"""Upper bound for things that must happen; never reached when the code works."""
KEY = new_key()


class CreatesMarker:
    """Unpickling this runs ``open(path, "w")``: proof that a payload was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (self.path, "w")


def closed_by_peer(sock: socket.socket) -> bool:
    """``True`` when the other end closes the connection (EOF or reset) within WAIT."""
    sock.settimeout(WAIT)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def wait_until(condition: Callable[[], bool], *, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[CheckpointCoordinator]:
    c = CheckpointCoordinator(
        job_id="j-u", attempt=1, parallelism=1, max_parallelism=128, stages=1,
        storage=CheckpointStorage((tmp_path / "ckpt").as_uri(), "j-u"),
        store=InMemoryCheckpointStore(retained=1), counter=InMemoryCheckpointIdCounter(),
        settings=CheckpointSettings(interval=0.0), initial_restore=None,
        initial_restore_pointer=None, key=KEY)
    try:
        yield c
    finally:
        c.stop()


def register(c: CheckpointCoordinator) -> SubtaskConnection:
    conn = connect("127.0.0.1", c.port, key=KEY)
    conn.sock.settimeout(WAIT)
    conn.send(Register(epoch=1, subtask=0, host="localhost", pid=0,
                       channel=ChannelAddress(host="127.0.0.1", port=1)))
    assert isinstance(conn.receive(), Registered)
    return conn


class TestAStrangerAtTheCoordinator:
    def test_a_pickle_is_never_unpickled_and_its_connection_is_closed(
            self, coordinator: CheckpointCoordinator, tmp_path: Path) -> None:
        marker = tmp_path / "marker"
        payload = pickle.dumps(CreatesMarker(marker))
        with socket.create_connection(("127.0.0.1", coordinator.port)) as sock:
            sock.sendall(struct.pack(">I", len(payload)) + payload)
            assert closed_by_peer(sock)
        assert not marker.exists(), "the coordinator unpickled a stranger's message"
        wait_until(lambda: coordinator.rejected_connections == 1, what="it is counted")
        # The job's own subtask still registers and is heard.
        conn = register(coordinator)
        conn.send(Ready(epoch=1, subtask=0))
        wait_until(lambda: coordinator.trigger() is not None, what="the subtask is ready")
        assert coordinator.failure is None

    def test_an_oversized_length_prefix_is_refused_without_waiting_for_it(
            self, coordinator: CheckpointCoordinator) -> None:
        with socket.create_connection(("127.0.0.1", coordinator.port)) as sock:
            sock.sendall(b"\xff\xff\xff\xff" + b"x" * 64)
            assert closed_by_peer(sock), "the coordinator waits for a 4 GiB message"

    def test_a_wrong_key_is_refused_and_the_subtask_learns_why(
            self, coordinator: CheckpointCoordinator) -> None:
        with pytest.raises(ConnectionLost, match="does not hold this job attempt's key"):
            connect("127.0.0.1", coordinator.port, key=new_key())
        wait_until(lambda: coordinator.rejected_connections == 1, what="it is counted")

    def test_a_malformed_message_after_the_handshake_closes_only_that_connection(
            self, coordinator: CheckpointCoordinator, caplog: pytest.LogCaptureFixture) -> None:
        conn = register(coordinator)
        data = b'{"v":%d,"type":"shutdown"}' % FORMAT_VERSION
        tag = conn._session.outgoing.tag(data)
        conn.sock.sendall(struct.pack(">I", len(data)) + data + tag)
        assert closed_by_peer(conn.sock)
        wait_until(lambda: coordinator.rejected_connections == 1, what="it is counted")
        assert "unknown control message type 'shutdown'" in caplog.text
        assert coordinator.failure is None
        register(coordinator)  # the coordinator goes on serving

    def test_a_forged_frame_on_an_authenticated_connection_closes_it(
            self, coordinator: CheckpointCoordinator) -> None:
        conn = register(coordinator)
        data = b'{"v":%d,"type":"ready","epoch":1,"subtask":0}' % FORMAT_VERSION
        conn.sock.sendall(struct.pack(">I", len(data)) + data + b"\0" * 32)
        assert closed_by_peer(conn.sock)
        wait_until(lambda: coordinator.rejected_connections == 1, what="it is counted")


class Relay:
    """A man in the middle that forwards a real handshake and records what the client sent."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.from_client = bytearray()
        self._target = target
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        client, _ = self.listener.accept()
        server = socket.create_connection(self._target)

        def pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
            try:
                while chunk := src.recv(4096):
                    if record is not None:
                        record.extend(chunk)
                    dst.sendall(chunk)
            except OSError:
                pass

        threading.Thread(target=pump, args=(server, client, None), daemon=True).start()
        pump(client, server, self.from_client)


class TestTheHandshake:
    def serve(self, *, key: bytes, accepted: list[Session | Exception]) -> tuple[str, int]:
        listener = socket.create_server(("127.0.0.1", 0))

        def run() -> None:
            while True:
                try:
                    sock, _ = listener.accept()
                except OSError:
                    return
                try:
                    accepted.append(server_handshake(sock, key=key, purpose=Purpose.DATA,
                                                     timeout=WAIT))
                except HandshakeFailed as exc:
                    accepted.append(exc)
                    sock.close()

        threading.Thread(target=run, daemon=True).start()
        address: tuple[str, int] = listener.getsockname()[:2]
        return address

    def test_both_ends_with_the_key_agree_on_frame_keys(self) -> None:
        accepted: list[Session | Exception] = []
        address = self.serve(key=KEY, accepted=accepted)
        with socket.create_connection(address) as sock:
            client = client_handshake(sock, key=KEY, purpose=Purpose.DATA)
            wait_until(lambda: len(accepted) == 1, what="the server finishes")
            server = accepted[0]
            assert isinstance(server, Session)
            server.incoming.check(client.outgoing.tag(b"frame"), b"frame")
            client.incoming.check(server.outgoing.tag(b"credit"), b"credit")

    def test_a_server_without_the_key_is_refused_by_the_client(self) -> None:
        accepted: list[Session | Exception] = []
        address = self.serve(key=new_key(), accepted=accepted)
        with socket.create_connection(address) as sock, \
                pytest.raises(HandshakeFailed, match="server does not hold"):
            client_handshake(sock, key=KEY, purpose=Purpose.DATA)

    def test_a_proof_for_the_control_endpoint_does_not_open_a_data_channel(self) -> None:
        accepted: list[Session | Exception] = []
        address = self.serve(key=KEY, accepted=accepted)
        with socket.create_connection(address) as sock, pytest.raises(HandshakeFailed):
            client_handshake(sock, key=KEY, purpose=Purpose.CONTROL)
        wait_until(lambda: len(accepted) == 1, what="the server decides")
        assert isinstance(accepted[0], HandshakeFailed)

    def test_a_replayed_handshake_transcript_is_refused(self) -> None:
        accepted: list[Session | Exception] = []
        address = self.serve(key=KEY, accepted=accepted)
        relay = Relay(address)
        with socket.create_connection(relay.address) as sock:
            client_handshake(sock, key=KEY, purpose=Purpose.DATA)
            wait_until(lambda: len(accepted) == 1, what="the genuine handshake completes")
            wait_until(lambda: len(relay.from_client) == 42 + 32, what="it is recorded")
        assert isinstance(accepted[0], Session)
        with socket.create_connection(address) as replay:
            replay.sendall(bytes(relay.from_client))
            assert closed_by_peer(replay)
        wait_until(lambda: len(accepted) == 2, what="the server decides")
        assert isinstance(accepted[1], HandshakeFailed)
        assert "does not hold this job attempt's key" in str(accepted[1])

    def test_a_silent_stranger_is_dropped_after_the_handshake_timeout(self) -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        outcome: list[Exception] = []

        def run() -> None:
            sock, _ = listener.accept()
            try:
                server_handshake(sock, key=KEY, purpose=Purpose.DATA, timeout=0.2)
            except HandshakeFailed as exc:
                outcome.append(exc)
            sock.close()

        threading.Thread(target=run, daemon=True).start()
        with socket.create_connection(listener.getsockname()[:2]) as sock:
            sock.sendall(b"CJOB")  # and then nothing
            assert closed_by_peer(sock)
        assert outcome and "timed out" in str(outcome[0])


class TestAStrangerAtAChannelListener:
    @pytest.fixture
    def listener(self) -> Iterator[tuple[ChannelListener, list[ChannelHello], tuple[str, int]]]:
        sock = socket.create_server(("127.0.0.1", 0))
        opened: list[ChannelHello] = []
        gate = InputGate(channels=2)

        def on_channel(conn: socket.socket, session: Session, hello: ChannelHello) -> None:
            opened.append(hello)
            threading.Thread(target=serve_input_channel, daemon=True, kwargs={
                "sock": conn, "session": session, "gate": gate, "channel": hello.sender,
                "credits": 1}).start()

        listener = ChannelListener(sock=sock, key=KEY, on_channel=on_channel)
        try:
            yield listener, opened, sock.getsockname()[:2]
        finally:
            listener.stop()

    def test_a_pickled_greeting_is_never_unpickled_and_its_connection_is_closed(
            self, listener: tuple[ChannelListener, list[ChannelHello], tuple[str, int]],
            tmp_path: Path) -> None:
        channels, opened, address = listener
        marker = tmp_path / "marker"
        payload = pickle.dumps(CreatesMarker(marker))
        with socket.create_connection(address) as sock:
            sock.sendall(HEADER.pack(int(Kind.HELLO), len(payload), 0) + payload)
            assert closed_by_peer(sock)
        assert not marker.exists(), "the channel listener unpickled a stranger's greeting"
        wait_until(lambda: channels.rejected == 1, what="it is counted")
        assert opened == []

    def test_an_oversized_frame_header_is_refused_without_waiting_for_it(
            self, listener: tuple[ChannelListener, list[ChannelHello], tuple[str, int]]) -> None:
        channels, _, address = listener
        with socket.create_connection(address) as sock:
            sock.sendall(HEADER.pack(int(Kind.ROWS), 0xFFFFFFFF, 0) + b"x" * 64)
            assert closed_by_peer(sock)
        wait_until(lambda: channels.rejected == 1, what="it is counted")

    def test_a_peer_with_the_key_still_opens_its_channel(
            self, listener: tuple[ChannelListener, list[ChannelHello], tuple[str, int]]) -> None:
        channels, opened, address = listener
        with socket.create_connection(address) as stranger:
            stranger.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert closed_by_peer(stranger)
        sender = TcpOutputChannel(address=address, hello=ChannelHello(stage=1, sender=1),
                                  key=KEY)
        try:
            wait_until(lambda: opened == [ChannelHello(stage=1, sender=1)],
                       what="the channel opens")
        finally:
            sender.close()
        assert channels.rejected == 1


class TestListenersInLocalMode:
    def test_the_coordinator_binds_loopback(self, coordinator: CheckpointCoordinator) -> None:
        assert _driver_host("local[2,4]", {}) == ("127.0.0.1", "127.0.0.1")
        assert coordinator.host == "127.0.0.1"

    def test_a_subtask_listener_binds_loopback(self) -> None:
        assert channel_addresses(loopback=True, context=None) == ("127.0.0.1", "127.0.0.1")

    def test_on_kubernetes_the_coordinator_binds_the_pod_ip_not_every_interface(self) -> None:
        conf = {"spark.driver.host": "clicks-driver.team.svc",
                "spark.driver.bindAddress": "10.244.0.7"}
        assert _driver_host("k8s://https://kubernetes.default.svc", conf, {}) == (
            "10.244.0.7", "clicks-driver.team.svc")
        conf = {"spark.driver.host": "clicks-driver.team.svc"}
        assert _driver_host("k8s://https://kubernetes.default.svc", conf,
                            {"POD_IP": "10.244.0.8"}) == ("10.244.0.8", "clicks-driver.team.svc")
