"""A pytest plugin providing a real S3 API (moto's server on loopback) and faults.

Fixtures:

* ``s3_server`` (session): moto's threaded server on a free loopback port.
* ``s3_bucket`` (function): a fresh, empty bucket per test, emptied and removed
  afterwards; gives ``endpoint_url``, ``bucket``, ``uri``, ``s3_config``, ``env``
  (variables to export to a driver process) and a boto3 ``client``.
* ``s3_faults`` (function): a bucket reached through a :class:`FaultProxy`, a
  small TCP proxy in front of moto that can pass traffic, delay it, drop
  connections, hang without answering, or answer every request with an HTTP
  error. Its ``s3_config`` uses short timeouts and few retries, so a simulated
  outage surfaces within seconds.

moto has no switch to make S3 unreachable or slow, so outages are simulated at
the TCP level, which is also what a real outage looks like to boto3. Register
the plugin with ``pytest_plugins = ["e2e.s3"]`` in the root ``conftest.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cjob_checkpoint.storage.s3 import S3Config, shared_s3_client

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


@dataclasses.dataclass(frozen=True, kw_only=True)
class S3Server:
    """A running S3 API endpoint."""

    host: str
    port: int

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class S3Bucket:
    """One bucket on an S3 endpoint, with everything a test needs to reach it."""

    endpoint_url: str
    bucket: str
    s3_config: S3Config
    client: Any

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that make :meth:`S3Config.from_env` reach this bucket."""
        return {
            **self.s3_config.to_env(),
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": REGION,
        }


def build_config(endpoint_url: str, **overrides: Any) -> S3Config:
    """An :class:`S3Config` with the test credentials for ``endpoint_url``."""
    fields: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "region": REGION,
        "access_key_id": ACCESS_KEY,
        "secret_access_key": SECRET_KEY,
        **overrides,
    }
    return S3Config(**fields)


def find_free_port() -> int:
    """A loopback port nobody listens on right now (and, once closed, refuses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto_server() -> tuple[Any, S3Server]:
    """Start moto's threaded server on a free loopback port; returns (server, address).

    Port 0 lets the kernel pick the port, so parallel sessions never collide.
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    address = S3Server(host=host, port=int(port))
    _wait_until_listening(address.host, address.port)
    return server, address


def _wait_until_listening(host: str, port: int, *, attempts: int = 200) -> None:
    for _ in range(attempts):
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port}")


def create_bucket(endpoint_url: str, *, prefix: str = "test") -> S3Bucket:
    """Create a bucket with a unique name on ``endpoint_url``."""
    config = build_config(endpoint_url)
    client = shared_s3_client(config)
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return S3Bucket(endpoint_url=endpoint_url, bucket=name, s3_config=config, client=client)


def remove_bucket(bucket: S3Bucket) -> None:
    """Empty and delete ``bucket`` (best effort: the server may already be gone)."""
    with contextlib.suppress(Exception):
        paginator = bucket.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket.bucket):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                bucket.client.delete_objects(Bucket=bucket.bucket, Delete={"Objects": keys})
        bucket.client.delete_bucket(Bucket=bucket.bucket)


# --------------------------------------------------------------------------- faults


class FaultProxy:
    """A loopback TCP proxy in front of an S3 endpoint that can misbehave on demand.

    Modes (switching closes every open connection, so clients reconnect and meet
    the new behaviour at once):

    * ``pass_through()``: forward bytes both ways;
    * ``delay(seconds)``: wait before connecting upstream, then forward;
    * ``drop_connections()``: accept and reset every connection at once;
    * ``hang()``: accept, read the request and never answer (client timeouts);
    * ``fail_with(status, code)``: answer every request with an S3 XML error.
    """

    def __init__(self, *, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._mode = "pass"
        self._delay = 0.0
        self._status = 503
        self._code = "ServiceUnavailable"
        self._stopped = threading.Event()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept_loop, name="s3-fault-proxy",
                                        daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode

    def pass_through(self) -> None:
        self._set_mode("pass")

    def delay(self, seconds: float) -> None:
        self._delay = seconds
        self._set_mode("delay")

    def drop_connections(self) -> None:
        self._set_mode("drop")

    def hang(self) -> None:
        self._set_mode("hang")

    def fail_with(self, status: int = 503, code: str = "ServiceUnavailable") -> None:
        self._status = status
        self._code = code
        self._set_mode("error")

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._close_all()
        self._thread.join(timeout=5)

    def _set_mode(self, mode: str) -> None:
        self._mode = mode
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            sockets = list(self._sockets)
            self._sockets.clear()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(client, self._mode),
                             name="s3-fault-proxy-conn", daemon=True).start()

    def _handle(self, client: socket.socket, mode: str) -> None:
        if mode == "drop":
            # Linger 0 turns close() into a reset, like a crashed endpoint.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            client.close()
            return
        self._track(client)
        if mode == "hang":
            self._drain(client)
            return
        if mode == "error":
            self._answer_error(client)
            return
        if mode == "delay":
            self._stopped.wait(self._delay)
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self._track(upstream)
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _drain(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while client.recv(65536):
                pass
        with contextlib.suppress(OSError):
            client.close()

    def _answer_error(self, client: socket.socket) -> None:
        data = b""
        with contextlib.suppress(OSError):
            client.settimeout(5)
            while b"\r\n\r\n" not in data:
                chunk = client.recv(65536)
                if not chunk:
                    break
                data += chunk
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{self._code}</Code><Message>injected fault</Message>"
            "<RequestId>fault</RequestId></Error>"
        ).encode()
        head = (
            f"HTTP/1.1 {self._status} Injected\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            client.sendall(head + body)
        with contextlib.suppress(OSError):
            client.close()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FaultyS3:
    """A bucket reached through a :class:`FaultProxy` (and directly, for set-up)."""

    proxy: FaultProxy
    bucket: S3Bucket
    s3_config: S3Config

    @property
    def endpoint_url(self) -> str:
        return self.proxy.endpoint_url

    @property
    def uri(self) -> str:
        return self.bucket.uri


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on loopback for the whole session."""
    pytest.importorskip("moto.server", reason="moto[server] is needed for the S3 API")
    server, address = start_moto_server()
    try:
        yield address
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[S3Bucket]:
    """A fresh bucket for one test."""
    bucket = create_bucket(s3_server.endpoint_url)
    try:
        yield bucket
    finally:
        remove_bucket(bucket)


@pytest.fixture
def s3_faults(s3_server: S3Server, s3_bucket: S3Bucket) -> Iterator[FaultyS3]:
    """``s3_bucket`` behind a fault-injecting proxy, with short timeouts and retries."""
    proxy = FaultProxy(upstream_host=s3_server.host, upstream_port=s3_server.port)
    config = build_config(proxy.endpoint_url, connect_timeout=1.0, read_timeout=1.0,
                          max_attempts=2)
    try:
        yield FaultyS3(proxy=proxy, bucket=s3_bucket, s3_config=config)
    finally:
        proxy.stop()
