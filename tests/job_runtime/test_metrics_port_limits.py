"""The driver's metrics port cannot be held open by idle or slow connections.

It listens on every address of the pod (Prometheus scrapes it through the pod's IP),
so anyone who reaches the pod can connect: idle connections must neither stop a
scrape from being answered nor pile up threads, and each is closed by the server
once its time is up. Real loopback idle_sockets against the driver's own server.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from idle_peers import closed_by_server
from prometheus_client.exposition import choose_encoder

from e2e.controlplane.waiting import wait_for
from job_runtime.metrics import DriverMetrics
from job_runtime.metrics_server import MetricsServer

IDLE = 300
SHORT_REQUEST_SECONDS = 1.0


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port: int = probe.getsockname()[1]
        return port




def scrape(port: int, path: str = "/metrics") -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()




@pytest.fixture
def server() -> Iterator[MetricsServer]:
    metrics = DriverMetrics(job="clicks")
    metrics.completed.labels("clicks").inc()
    served = MetricsServer(registry=metrics.registry, port=0, host="127.0.0.1",
                           request_seconds=SHORT_REQUEST_SECONDS)
    yield served
    served.close()


class TestAFloodOfIdleConnections:
    def test_three_hundred_idle_connections_neither_stop_a_scrape_nor_hold_threads(
            self, idle_sockets: list[socket.socket]) -> None:
        threads_before = threading.active_count()
        metrics = DriverMetrics(job="clicks")
        metrics.completed.labels("clicks").inc()
        port = free_port()
        metrics.serve(port)  # as the driver opens it: every address, the real limits
        for _ in range(IDLE):
            idle_sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))

        status, _, body = scrape(port)
        assert status == 200
        assert b'cjob_checkpoint_completed_total{cjob_job="clicks"} 1.0' in body
        assert threading.active_count() - threads_before < 50

    def test_the_server_closes_every_idle_connection_once_its_time_is_up(
            self, server: MetricsServer, idle_sockets: list[socket.socket]) -> None:
        for _ in range(IDLE):
            idle_sockets.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        wait_for(lambda: all(map(closed_by_server, idle_sockets)),
                 what="the server to close the idle connections", timeout=10)
        wait_for(lambda: server.active == 0, what="their threads to end", timeout=5)


class TestEachConnectionIsShortLived:
    def test_a_client_sending_a_byte_now_and_then_is_cut_off_at_the_deadline(
            self, server: MetricsServer) -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            started = time.monotonic()
            request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            for byte in request:
                if closed_by_server(sock):
                    break
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
            assert closed_by_server(sock)
            assert time.monotonic() - started < SHORT_REQUEST_SECONDS + 2.0

    def test_the_connection_is_closed_after_one_answer_even_if_kept_alive(
            self, server: MetricsServer) -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.0 200")
        assert b"cjob_checkpoint_completed_total" in data


class TestItServesWhatPrometheusClientServes:
    @pytest.mark.parametrize("path", ["/metrics", "/"])
    def test_the_metrics_are_served_as_plain_text_on_the_usual_paths(
            self, server: MetricsServer, path: str) -> None:
        status, content_type, body = scrape(server.port, path)
        assert status == 200
        assert content_type == choose_encoder("")[1]
        assert b"# TYPE cjob_checkpoint_completed_total counter" in body

    def test_a_scraper_asking_for_openmetrics_gets_openmetrics(
            self, server: MetricsServer) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        try:
            conn.request("GET", "/metrics",
                         headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            response = conn.getresponse()
            assert response.status == 200
            assert (response.getheader("Content-Type") or "").startswith(
                "application/openmetrics-text")
            assert response.read().endswith(b"# EOF\n")
        finally:
            conn.close()
