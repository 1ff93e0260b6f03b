"""The driver's metrics port: the registry served over HTTP.

The driver serves its metrics on its metrics port (:class:`MetricsServer`), which listens on
every address: the job's NetworkPolicy lets Prometheus scrape the pod, so whoever
reaches the pod can connect too. The server is built so that idle or slow
connections cannot hold it: a connection has :data:`METRICS_REQUEST_SECONDS` for its
whole request and answer, at most :data:`MAX_METRICS_CONNECTIONS` are served at once,
and each is closed after its answer. A connection that finds them all taken takes
the place of the oldest one still sending its request (a scrape sends its request at
once, so that one is idle or slow); only if all of them are being answered is it
closed at once.
"""

from __future__ import annotations

import collections
import gzip
import http.server
import io
import logging
import socket
import socketserver
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from job_runtime.rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)

METRICS_REQUEST_SECONDS = 5.0
"""Seconds a scrape connection has for its whole request and the answer to it.

A scrape sends one small request and reads a few kilobytes: milliseconds on the
pod network. Prometheus itself gives up on a target after its scrape timeout (10 s by
default), so five seconds refuses nothing a scrape could use, and bounds how long an
idle or byte-dribbling peer keeps one of the connections served at once."""
MAX_METRICS_CONNECTIONS = 16
"""Connections served at once (past it, the oldest still sending its request is
dropped for a newcomer, or the newcomer is closed at once).

One Prometheus (or two, in a high-availability pair) scrapes every few seconds, each
scrape one short connection: sixteen leaves room for retries, a person's ``curl`` and
the odd health check, and bounds the threads strangers can take to sixteen."""
METRICS_BIND_ADDRESS = "0.0.0.0"
"""Where the metrics port listens: every IPv4 address of the pod, which the Prometheus
scrape (admitted by the job's NetworkPolicy) reaches through the pod's IP."""


class _DeadlineReader(io.RawIOBase):
    """A connection's incoming bytes, each read given only what is left of ``deadline``.

    The timeout of a socket bounds each read, not a request: a peer that sends a byte
    now and then would keep a plain reader waiting for as long as it likes.
    """

    def __init__(self, *, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out: the request did not arrive in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    """Answers one request with the registry, as ``prometheus_client`` does: any path
    but ``/favicon.ico`` (served empty) gets the metrics, in the format the ``Accept``
    header asks for, compressed if ``Accept-Encoding`` allows it."""

    server: _MetricsHTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: no keep-alive

    def setup(self) -> None:
        self.connection = self.request
        deadline = time.monotonic() + self.server.request_seconds
        self.connection.settimeout(self.server.request_seconds)
        self.rfile = io.BufferedReader(_DeadlineReader(sock=self.connection,
                                                       deadline=deadline))
        self.wfile = socketserver._SocketWriter(self.connection)  # type: ignore[attr-defined]
        self._deadline = deadline

    def handle(self) -> None:
        try:
            self.close_connection = True
            self.handle_one_request()
        except OSError:  # a timeout, or the peer went away: nothing left to say
            self.close_connection = True

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.server.request_read(self.connection)
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out before the answer")
        self.connection.settimeout(left)  # bounds the whole answer, as for ``sendall``
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/favicon.ico":
            self._answer(200, b"", [])
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        registry: Any = self.server.registry
        names = parse_qs(url.query).get("name[]")
        if names:
            registry = registry.restricted_registry(names)
        body = encoder(registry)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(self.headers.get("Accept-Encoding", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        self._answer(200, body, headers)

    def do_OPTIONS(self) -> None:
        self._answer(200, b"", [("Allow", "OPTIONS,GET")])

    def _not_allowed(self) -> None:
        self._answer(405, f"# HTTP 405 Method Not Allowed: {self.command}; use OPTIONS or "
                          f"GET\n".encode(), [("Allow", "OPTIONS,GET")])

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _not_allowed

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged: one line every few seconds says nothing."""


class _MetricsHTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(self, *, address: tuple[str, int], registry: CollectorRegistry,
                 request_seconds: float, max_connections: int) -> None:
        self.registry = registry
        self.request_seconds = request_seconds
        self.max_connections = max_connections
        self.active = 0
        self.active_lock = threading.Lock()
        self._reading: collections.OrderedDict[socket.socket, Any] = collections.OrderedDict()
        """Connections being served that have not sent their whole request yet, oldest first."""
        self.dropped = RateLimitedLog(logger=log, what="metrics port dropped a connection "
                                      "past its limit of connections served at once")
        super().__init__(address, _MetricsHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        oldest = None
        with self.active_lock:
            full = self.active >= self.max_connections
            if full and self._reading:
                oldest, oldest_address = self._reading.popitem(last=False)
                full = False
            if not full:
                self.active += 1
                self._reading[request] = client_address
        if oldest is not None:
            _shut(oldest)  # its thread fails its read at once, and ends
            self.dropped.event(f"{oldest_address} had not sent its request when "
                               f"{self.max_connections} connections were served")
        if full:
            self.shutdown_request(request)
            self.dropped.event(f"{client_address} came while {self.max_connections} "
                               f"connections were being answered")
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread: the connection is not served after all
            self._done(request)
            raise

    def request_read(self, request: socket.socket) -> None:
        """``request`` sent its whole request: it is answered, not dropped for a newcomer."""
        with self.active_lock:
            self._reading.pop(request, None)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self.active_lock:
            self.active -= 1
            self._reading.pop(request, None)

    def server_bind(self) -> None:
        # ``HTTPServer.server_bind`` looks up the host's name, which can hang on a pod
        # without DNS; the name is never used.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


def _shut(sock: socket.socket) -> None:
    """End a connection another thread reads: ``shutdown`` wakes its ``recv``."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class MetricsServer:
    """Serves ``registry`` on ``host``:``port`` (``0``: any free port) in a daemon thread.

    Each connection gets ``request_seconds`` in all to send its request and read the
    answer, and is closed after it; at most ``max_connections`` are served at once: a
    newcomer past them drops the oldest still sending its request, or is closed on
    arrival if all are being answered (counted, and logged at a bounded rate).
    """

    def __init__(self, *, registry: CollectorRegistry, port: int,
                 host: str = METRICS_BIND_ADDRESS,
                 request_seconds: float = METRICS_REQUEST_SECONDS,
                 max_connections: int = MAX_METRICS_CONNECTIONS) -> None:
        self._httpd = _MetricsHTTPServer(address=(host, port), registry=registry,
                                         request_seconds=request_seconds,
                                         max_connections=max_connections)
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="metrics-http")
        self._thread.start()

    @property
    def active(self) -> int:
        """Connections being served now."""
        with self._httpd.active_lock:
            return self._httpd.active

    @property
    def dropped(self) -> int:
        """Connections dropped, or closed on arrival, for want of a place."""
        return self._httpd.dropped.total

    def close(self) -> None:
        """Stop accepting; connections being served end by their deadline."""
        self._httpd.shutdown()
        self._httpd.server_close()
