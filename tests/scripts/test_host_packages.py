"""The host-package step: what `make run`, `make test` and CI check before anything long.

A newcomer who is not root must learn every missing package in one line, at once, not
after a 20-minute build; `make test` must take that step before the builds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import REPO

SCRIPT = REPO / "scripts" / "host-packages.sh"
NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def bare_path() -> Iterator[Path]:
    """A PATH folder with bash and the few tools the script itself uses, and no others;
    outside pytest's private temporary folder, so that nobody can use it too."""
    folder = Path(tempfile.mkdtemp(prefix="cjob-host-packages-"))
    folder.chmod(0o755)
    try:
        for tool in ("bash", "id", "env"):
            found = shutil.which(tool)
            assert found is not None
            (folder / tool).symlink_to(found)
        yield folder
    finally:
        shutil.rmtree(folder)


def run_script(*args: str, path: Path, as_nobody: bool) -> subprocess.CompletedProcess[str]:
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, *NOBODY] if as_nobody and os.geteuid() == 0 and setpriv else []
    env = {"PATH": str(path), "PYTHON": "/nonexistent/python3"}
    return subprocess.run([*prefix, str(path / "bash"), str(SCRIPT), *args], env=env,
                          capture_output=True, text=True, timeout=30, check=False)


class TestWithoutRoot:
    def test_missing_packages_are_named_in_one_line_with_the_command(
            self, bare_path: Path) -> None:
        if os.geteuid() != 0 and shutil.which("java"):
            pytest.skip("needs root to drop to nobody, or a host without java")
        proc = run_script("run", path=bare_path, as_nobody=True)
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith("error: missing host packages: ")
        assert "openjdk-17-jre-headless" in lines[0]
        assert "python3-venv" in lines[0]
        assert "apt-get install -y --no-install-recommends" in lines[0]
        assert proc.stdout == ""

    def test_the_list_names_each_missing_package_and_installs_nothing(
            self, bare_path: Path) -> None:
        proc = run_script("--list", "run", path=bare_path, as_nobody=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["openjdk-17-jre-headless", "python3-venv"]


def test_an_unknown_group_is_a_usage_error(bare_path: Path) -> None:
    proc = run_script("everything", path=bare_path, as_nobody=False)
    assert proc.returncode == 2
    assert "unknown argument 'everything'" in proc.stderr


def test_make_test_checks_host_packages_before_lint_and_the_long_builds() -> None:
    proc = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    lines = proc.stdout.splitlines()
    first_check = next(i for i, line in enumerate(lines) if "host-packages.sh" in line)
    later = [i for i, line in enumerate(lines)
             if "ruff" in line or "controlplane" in line or "e2e.images" in line
             or "pytest" in line]
    assert later and first_check < min(later), proc.stdout


def test_ci_runs_the_readmes_test_command_and_no_package_list_of_its_own() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "apt-get" not in ci, "CI must install host packages through make test's own step"
    assert "make test" in (REPO / "README.md").read_text()
