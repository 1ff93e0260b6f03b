"""The recovery-operator benchmark's ``python`` for driver pods: a driver started with the
operator's ``--settings`` document gets a status file in its pod's folder inside the
document (the runtime refuses flags beside it), one started with flags gets the flag,
and any other command runs unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.operator_recovery import STATUS_FILE, write_python_shim
from cjob_spec.runtime_settings import RuntimeSettings

SETTINGS = RuntimeSettings(entrypoint="job:build", python_path=("/code",), args={},
                           job_name="sums", job_uid="u1", parallelism=2, master="local[2]",
                           checkpoint_storage="file:///tmp/c", store="file:/tmp/s",
                           attempt=1)


def run_shim(tmp_path: Path, *args: str) -> list[str]:
    """The arguments the shim hands the interpreter, which here prints them."""
    echo = tmp_path / "echo"
    echo.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    echo.chmod(0o755)
    shim = write_python_shim(tmp_path / "shim", python=str(echo)) / "python"
    pod = tmp_path / "pod"
    done = subprocess.run([str(shim), *args], env={"CJOB_POD_DIR": str(pod), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, check=True)
    printed: list[str] = json.loads(done.stdout)
    return printed


def test_a_driver_given_the_settings_document_gets_its_status_file_inside_it(
        tmp_path: Path) -> None:
    args = run_shim(tmp_path, "-m", "job_runtime", "run", "--settings", SETTINGS.encode())
    assert args[:4] == ["-m", "job_runtime", "run", "--settings"] and len(args) == 5
    given = RuntimeSettings.decode(args[4])
    assert given.status_file == str(tmp_path / "pod" / STATUS_FILE)
    assert given.job_name == "sums" and given.attempt == 1


def test_a_driver_given_flags_gets_the_flag_and_anything_else_runs_unchanged(
        tmp_path: Path) -> None:
    flags = ["-m", "job_runtime", "run", "--job-name", "sums"]
    assert run_shim(tmp_path, *flags) == [*flags, "--status-file",
                                          str(tmp_path / "pod" / STATUS_FILE)]
    assert run_shim(tmp_path, "-c", "print(1)") == ["-c", "print(1)"]
