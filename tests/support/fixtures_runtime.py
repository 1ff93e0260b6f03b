"""Fixtures of the runtime tests, unit and Spark tiers alike; the helpers behind them
live in ``jobs/runtime_harness.py`` (the root conftest puts ``jobs/`` on ``sys.path``)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime_harness import (
    EmbeddedRun,
    JobHarness,
    run_embedded,
    write_job_yaml,
)


@pytest.fixture
def harness(tmp_path: Path) -> JobHarness:
    return JobHarness(tmp_path)


@pytest.fixture(scope="session")
def new_harness() -> Callable[[Path], JobHarness]:
    """For module-scoped runs: ``new_harness(tmp_path_factory.mktemp(...))``."""
    return JobHarness


@pytest.fixture(scope="session")
def embedded() -> Callable[..., EmbeddedRun]:
    return run_embedded


@pytest.fixture(scope="session")
def job_yaml() -> Callable[..., Path]:
    return write_job_yaml


@pytest.fixture
def idle_sockets() -> Iterator[list[socket.socket]]:
    """Connections a listener test opens and leaves idle; closed after the test."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()
