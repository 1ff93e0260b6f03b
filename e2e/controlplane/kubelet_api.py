"""The part of the kubelet API the apiserver calls for ``kubectl logs``.

The apiserver fetches ``/containerLogs/<namespace>/<pod>/<container>`` from the node's
InternalIP and ``daemonEndpoints.kubeletEndpoint.Port``, presenting its kubelet client
certificate; this server requires a certificate from the cluster CA, like a kubelet
with client-certificate authentication. Supported query parameters: ``previous``,
``tailLines``, ``limitBytes`` and ``follow``.
"""

from __future__ import annotations

import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol


class LogSource(Protocol):
    """What the server needs from the node."""

    def log_file(self, *, namespace: str, name: str, container: str, previous: bool) -> Path: ...

    def is_container_running(self, *, namespace: str, name: str, container: str) -> bool: ...


def tail_lines(data: bytes, count: int) -> bytes:
    """The last ``count`` lines of ``data`` (a trailing newline ends the last line)."""
    if count <= 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-count:])


class KubeletApiServer:
    """A TLS server for container logs, on 127.0.0.1 and a free port."""

    def __init__(self, *, source: LogSource, cert: Path, key: Path, client_ca: Path) -> None:
        self.source = source
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
        handler = _handler_for(source)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port: int = self.httpd.server_address[1]
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="kubelet-api", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler_for(source: LogSource) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if url.path == "/healthz":
                self._reply(200, b"ok")
                return
            if len(parts) != 4 or parts[0] != "containerLogs":
                self._reply(404, b"not found")
                return
            _, namespace, name, container = parts
            query = urllib.parse.parse_qs(url.query)

            def flag(key: str) -> bool:
                return query.get(key, ["false"])[0] == "true"

            try:
                path = source.log_file(
                    namespace=namespace, name=name, container=container, previous=flag("previous")
                )
            except LookupError as exc:
                self._reply(404, str(exc).encode())
                return
            data = path.read_bytes() if path.exists() else b""
            if "tailLines" in query:
                data = tail_lines(data, int(query["tailLines"][0]))
            limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
            if limit is not None:
                data = data[:limit]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            if not flag("follow"):
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.end_headers()
            self.wfile.write(data)
            self._follow(path, offset=path.stat().st_size if path.exists() else 0,
                         namespace=namespace, name=name, container=container)  # fmt: skip

        def _follow(
            self, path: Path, *, offset: int, namespace: str, name: str, container: str
        ) -> None:
            while True:
                running = source.is_container_running(
                    namespace=namespace, name=name, container=container
                )
                if path.exists() and path.stat().st_size > offset:
                    with path.open("rb") as f:
                        f.seek(offset)
                        chunk = f.read()
                    offset += len(chunk)
                    try:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    except OSError:
                        return
                elif not running:
                    return
                time.sleep(0.2)

        def _reply(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
