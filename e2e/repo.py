"""The repository the harness runs from: where it finds the chart, the CRDs, the
examples, and the folder a child process starts in."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
