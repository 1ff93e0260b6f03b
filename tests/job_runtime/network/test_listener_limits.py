"""Idle and slow strangers on the coordinator's and the channels' ports.

A stranger can neither hold a listener's thread past the handshake's deadline by
sending a byte now and then, nor, by opening connections and saying nothing, pile up
threads or keep out a peer that holds the attempt's key. Real loopback idle_sockets.
"""

from __future__ import annotations

import socket
import threading
import time

from idle_peers import closed_by_server, open_idle

from e2e.controlplane.waiting import wait_for
from job_runtime.coordinator.rpc import RpcServer, connect
from job_runtime.network.admission import MAX_UNAUTHENTICATED
from job_runtime.network.channels import ChannelListener, TcpOutputChannel
from job_runtime.network.framing import ChannelHello
from job_runtime.network.handshake import (
    MAGIC,
    VERSION,
    HandshakeFailed,
    Purpose,
    client_handshake,
    new_key,
    server_handshake,
)

KEY = new_key()
DEADLINE = 2.5
"""The handshake deadline these tests give: a few of the dribbler's bytes fit in it."""
DRIBBLE_SECONDS = 1.0
"""The dribbler's pause between bytes: far below any per-read timeout used here."""
IDLE = MAX_UNAUTHENTICATED + 50
"""Idle connections opened against a listener: its cap and then some."""
LONG_DEADLINE = 60.0
"""A deadline no idle connection reaches while a test runs: whatever closes one is the cap."""








def dribble(sock: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send ``data`` one byte every :data:`DRIBBLE_SECONDS` until told to stop."""
    for byte in data:
        if stop.wait(DRIBBLE_SECONDS):
            return
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return


class TestTheHandshakeHasADeadlineForTheWholeExchange:
    def test_a_server_gives_up_on_a_client_sending_a_byte_every_second(self) -> None:
        client, server = socket.socketpair()
        stop = threading.Event()
        sender = threading.Thread(target=dribble, daemon=True,
                                  args=(client, MAGIC + bytes([VERSION, Purpose.DATA]) + bytes(64),
                                        stop))
        sender.start()
        outcome: list[BaseException] = []

        def serve() -> None:
            try:
                server_handshake(server, key=KEY, purpose=Purpose.DATA, timeout=DEADLINE)
            except HandshakeFailed as exc:
                outcome.append(exc)

        started = time.monotonic()
        handshake = threading.Thread(target=serve, daemon=True)
        handshake.start()
        try:
            handshake.join(timeout=DEADLINE + 3 * DRIBBLE_SECONDS)
            assert not handshake.is_alive(), "the handshake outlived its deadline"
            assert outcome and "timed out" in str(outcome[0])
            assert time.monotonic() - started >= DEADLINE - 0.1
        finally:
            stop.set()
            client.close()
            server.close()

    def test_a_client_gives_up_on_a_server_answering_a_byte_every_second(self) -> None:
        client, server = socket.socketpair()
        stop = threading.Event()
        sender = threading.Thread(target=dribble, args=(server, bytes(64), stop), daemon=True)
        sender.start()
        outcome: list[BaseException] = []

        def run() -> None:
            try:
                client_handshake(client, key=KEY, purpose=Purpose.DATA, timeout=DEADLINE)
            except HandshakeFailed as exc:
                outcome.append(exc)

        handshake = threading.Thread(target=run, daemon=True)
        handshake.start()
        try:
            handshake.join(timeout=DEADLINE + 3 * DRIBBLE_SECONDS)
            assert not handshake.is_alive(), "the handshake outlived its deadline"
            assert outcome and "timed out" in str(outcome[0])
        finally:
            stop.set()
            client.close()
            server.close()


class TestIdleStrangersCannotKeepOutAGenuinePeer:
    def test_a_channel_listener_full_of_idle_connections_still_admits_a_genuine_channel(
            self, idle_sockets: list[socket.socket]) -> None:
        threads_before = threading.active_count()
        accepted: list[ChannelHello] = []
        listening = socket.create_server(("127.0.0.1", 0))
        listener = ChannelListener(sock=listening, key=KEY, handshake_timeout=LONG_DEADLINE,
                                   on_channel=lambda sock, _, hello: accepted.append(hello))
        address: tuple[str, int] = listening.getsockname()[:2]
        try:
            idle_sockets.extend(open_idle(address, IDLE))
            wait_for(lambda: sum(map(closed_by_server, idle_sockets)) >= IDLE - MAX_UNAUTHENTICATED,
                     what="the connections past the cap to be dropped", timeout=10)
            assert threading.active_count() - threads_before < MAX_UNAUTHENTICATED + 20

            hello = ChannelHello(stage=1, sender=0)
            channel = TcpOutputChannel(address=address, hello=hello, key=KEY,
                                       connect_timeout=5)
            wait_for(lambda: accepted, what="the genuine channel to be accepted", timeout=5)
            still_open = sum(not closed_by_server(sock) for sock in idle_sockets)
            channel.close()
            assert accepted == [hello]
            # It got in while the strangers it displaced one of still held their places.
            assert still_open >= MAX_UNAUTHENTICATED - 1
        finally:
            listener.stop()

    def test_the_coordinator_full_of_idle_connections_still_admits_a_subtask(
            self, idle_sockets: list[socket.socket]) -> None:
        threads_before = threading.active_count()
        server = RpcServer(host="127.0.0.1", port=0, key=KEY, handler=lambda conn, msg: None,
                           handshake_timeout=LONG_DEADLINE)
        address = (server.host, server.port)
        try:
            idle_sockets.extend(open_idle(address, IDLE))
            wait_for(lambda: sum(map(closed_by_server, idle_sockets)) >= IDLE - MAX_UNAUTHENTICATED,
                     what="the connections past the cap to be dropped", timeout=10)
            assert threading.active_count() - threads_before < MAX_UNAUTHENTICATED + 20

            subtask = connect(server.host, server.port, key=KEY, timeout=5)
            still_open = sum(not closed_by_server(sock) for sock in idle_sockets)
            subtask.close()
            assert still_open >= MAX_UNAUTHENTICATED - 1
        finally:
            server.stop()
