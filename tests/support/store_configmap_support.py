"""Helpers for the ConfigMap store tests: a misbehaving apiserver proxy and a job's world.

``StoreWorld`` is one job: an empty ``<job>-checkpoints`` ConfigMap and a real
``file://`` checkpoint storage, so discarding really deletes checkpoint
directories. ``LossyApiProxy`` is a plain-HTTP proxy that we control in front of
the apiserver, to lose answers or go away mid-write.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import os
import ssl
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client as k8s_client

from cjob_checkpoint.checkpoint_storage import CheckpointStorage
from cjob_checkpoint.storage.local import local_path
from cjob_checkpoint.store.completed_store import CompletedCheckpoint
from cjob_checkpoint.store.configmap import (
    ConfigMapCheckpointIdCounter,
    ConfigMapCheckpointStore,
    advance_attempt,
    configure_for_store,
)

_FORWARDED_HEADERS = ("Content-Type", "Accept")


class LossyApiProxy:
    """A plain-HTTP proxy to the apiserver (as admin) that can misbehave on purpose.

    * :meth:`lose_answers` forwards the next matching requests to the apiserver,
      which applies them, then closes the client's connection without an answer:
      what a client sees when the apiserver dies right after writing to etcd.
    * :meth:`refuse_answers` answers the next matching requests with an error
      status without forwarding them (an apiserver that is shutting down).
    * :meth:`hang` keeps accepting requests but answers none of them until
      :meth:`resume` (a wedged apiserver or a half-open connection); the held
      requests are then dropped without an answer, as their clients gave up.
    * :meth:`stop` closes the listening socket and every open connection;
      :meth:`start` listens again on the same port (an apiserver restart).
    """

    def __init__(self, *, upstream: str, ca_file: Path, client_cert: Path,
                 client_key: Path) -> None:
        parts = urlsplit(upstream)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 443
        self._context = ssl.create_default_context(cafile=str(ca_file))
        self._context.load_cert_chain(str(client_cert), str(client_key))
        self._lock = threading.Lock()
        self._lose: dict[str, int] = {}
        self._refuse: dict[str, tuple[int, int]] = {}
        self._refuse_after: dict[str, int] = {}
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[Any] = set()
        self.port = 0
        self.lost: list[str] = []
        self.forwarded: list[str] = []
        self.hung: list[str] = []
        self._answering = threading.Event()
        self._answering.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lose_answers(self, *, method: str, count: int = 1) -> None:
        with self._lock:
            self._lose[method] = count

    def refuse_answers(self, *, method: str, status: int = 503, count: int = 1,
                       after: int = 0) -> None:
        """Refuse ``count`` requests of ``method`` after letting ``after`` of them through.

        ``after`` reaches the second write of a two-step change (commit, then
        prune), as an apiserver whose admission or RBAC changed in between would.
        """
        with self._lock:
            self._refuse[method] = (status, count)
            self._refuse_after[method] = after

    def hang(self) -> None:
        """Hold every request from now on without answering it."""
        self._answering.clear()

    def resume(self) -> None:
        """Answer requests again; the held ones are dropped unanswered."""
        self._answering.set()

    def start(self) -> None:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                proxy._handle(self)

            do_PUT = do_POST = do_DELETE = do_PATCH = do_GET

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True,
                                        name="lossy-proxy")
        self._thread.start()

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        self._answering.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            for connection in list(self._connections):
                try:
                    connection.shutdown(2)
                except OSError:
                    pass
            self._connections.clear()
        self._server = None

    def _take(self, table: dict[str, Any], method: str) -> Any:
        with self._lock:
            entry = table.get(method)
            if entry is None:
                return None
            count = entry if isinstance(entry, int) else entry[1]
            if count <= 1:
                del table[method]
            else:
                table[method] = entry - 1 if isinstance(entry, int) else (entry[0], count - 1)
            return entry

    def _let_through(self, method: str) -> bool:
        with self._lock:
            waiting = self._refuse_after.get(method, 0)
            if waiting <= 0 or method not in self._refuse:
                return False
            self._refuse_after[method] = waiting - 1
            return True

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        method = handler.command
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if not self._answering.is_set():
            with self._lock:
                self.hung.append(f"{method} {handler.path}")
            self._answering.wait()
            handler.close_connection = True
            return
        refused = None if self._let_through(method) else self._take(self._refuse, method)
        if refused is not None:
            payload = b'{"kind":"Status","status":"Failure","message":"apiserver is shutting down"}'
            handler.send_response(refused[0])
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            return
        connection = http.client.HTTPSConnection(self._host, self._port, context=self._context,
                                                 timeout=30)
        try:
            headers = {k: v for k in _FORWARDED_HEADERS if (v := handler.headers.get(k))}
            connection.request(method, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        finally:
            connection.close()
        self.forwarded.append(f"{method} {handler.path}")
        if self._take(self._lose, method) is not None:
            self.lost.append(f"{method} {handler.path} -> {response.status}")
            handler.close_connection = True
            return
        handler.send_response(response.status)
        handler.send_header("Content-Type", response.getheader("Content-Type") or "text/plain")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def api(self) -> Any:
        """A ``CoreV1Api`` talking through this proxy with the store's retry policy."""
        configuration = k8s_client.Configuration()
        configuration.host = self.url
        configure_for_store(configuration)
        return k8s_client.CoreV1Api(k8s_client.ApiClient(configuration))


@dataclasses.dataclass
class StoreWorld:
    """One job's store and checkpoint storage."""

    api: Any
    namespace: str
    job_name: str
    storage: CheckpointStorage
    discarded: list[int] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.job_name}-checkpoints"

    def store(self, *, attempt: int = 1, retained: int = 3, api: Any = None,
              **options: Any) -> ConfigMapCheckpointStore:
        return ConfigMapCheckpointStore(api=api or self.api, namespace=self.namespace,
                                        name=self.name, retained=retained, attempt=attempt,
                                        **options)

    def counter(self, *, attempt: int = 1, api: Any = None) -> ConfigMapCheckpointIdCounter:
        return ConfigMapCheckpointIdCounter(api=api or self.api, namespace=self.namespace,
                                            name=self.name, attempt=attempt)

    def advance(self, attempt: int) -> None:
        advance_attempt(api=self.api, namespace=self.namespace, name=self.name, attempt=attempt)

    def write_checkpoint(self, checkpoint_id: int, *, attempt: int = 1) -> CompletedCheckpoint:
        """Write a checkpoint's data, ``_metadata`` last, and return its pointer."""
        self.storage.write_state(checkpoint_id, "reduce", 0, b"state-%d" % checkpoint_id)
        path = self.storage.write_metadata(checkpoint_id, b'{"job": "x"}')
        return CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path,
                                   timestamp=float(checkpoint_id), size_bytes=20,
                                   attempt=attempt)

    def discard(self, checkpoint: CompletedCheckpoint) -> None:
        self.discarded.append(checkpoint.checkpoint_id)
        self.storage.discard(checkpoint)

    def has_data(self, checkpoint_id: int) -> bool:
        return os.path.isdir(local_path(self.storage.checkpoint_dir(checkpoint_id)))

    def data_ids(self) -> list[int]:
        return self.storage.list_completed_ids()

    def read_metadata(self, uri: str) -> bytes:
        return self.storage.read_metadata(uri)

    def raw(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.api.api_client.sanitize_for_serialization(
            self.api.read_namespaced_config_map(self.name, self.namespace))
        return obj

    def pointer_keys(self) -> list[str]:
        return sorted(k for k in (self.raw().get("data") or {}) if k.startswith("checkpointID-"))
