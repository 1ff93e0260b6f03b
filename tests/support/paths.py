"""Where things are, for tests in any folder: one definition instead of counting parents."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
"""This folder: helpers shared by the tests of every package and tier."""

REPO = SUPPORT.parents[1]
"""The repository's root."""

JOBS = SUPPORT / "jobs"
"""Small job modules the drivers of the runtime tests run."""
