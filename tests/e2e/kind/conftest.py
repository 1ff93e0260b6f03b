"""Fixtures for kind scenarios; everything here is skipped where Docker is absent."""

from __future__ import annotations

import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.kind.availability import kind_unavailable_reason


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[Path]:
    """A fresh kind cluster for the session; yields its kubeconfig path."""
    reason = kind_unavailable_reason()
    if reason is not None:
        pytest.skip(f"kind scenarios need Docker and kind: {reason}")
    name = f"cjob-e2e-{secrets.token_hex(3)}"
    kubeconfig = Path(tempfile.mkdtemp(prefix="cjob-kind-")) / "kubeconfig"
    subprocess.run(
        ["kind", "create", "cluster", "--name", name, "--kubeconfig", str(kubeconfig),
         "--wait", "180s"],
        check=True,
    )  # fmt: skip
    try:
        yield kubeconfig
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", name], check=False)
