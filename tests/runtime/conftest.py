"""Fixtures of the runtime tests; the helpers behind them live in ``jobs/runtime_harness.py``.

``jobs/`` holds the small job modules the drivers run and that helper module;
it goes on ``sys.path`` here so that test modules can import the helpers by a
name no other test folder uses.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "jobs"))

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
