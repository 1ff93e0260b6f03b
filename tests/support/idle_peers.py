"""Idle peers for the listener tests: connections that say nothing, and whether the
listener closed them."""

from __future__ import annotations

import select
import socket


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the other end closed ``sock``, without waiting."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def open_idle(address: tuple[str, int], count: int) -> list[socket.socket]:
    """``count`` connections to ``address`` that never send a byte."""
    return [socket.create_connection(address, timeout=5) for _ in range(count)]
