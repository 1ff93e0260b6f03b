"""Helpers to run real drivers (``python -m job_runtime run`` and ``python -m cjob run``).

A driver run starts Spark in local mode in a subprocess, which costs tens of
seconds here, so Spark tests reuse one run to check several things. Every run
has a generous timeout: a hang is a failure, not a wait. ``conftest.py`` puts
this folder on ``sys.path``; tests import from here, never from ``conftest``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from paths import REPO

JOBS = Path(__file__).resolve().parent
RUN_TIMEOUT = 240.0


def load_example(relative: str) -> ModuleType:
    """Import an example's script by path (example folders are not packages)."""
    path = REPO / relative
    name = "example_" + relative.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def error_lines(output: str) -> list[str]:
    """The ERROR lines of a driver's log."""
    return [line for line in output.splitlines() if " ERROR " in line]


def runtime_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    paths = [str(REPO), str(REPO / "operator"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p),
           "PYTHONUNBUFFERED": "1"}
    for name in ("CJOB_FAULTS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        env.pop(name, None)
    env.update(extra or {})
    return env


@dataclasses.dataclass(frozen=True)
class Finished:
    """A driver (or runner) process that ended."""

    returncode: int
    output: str
    status: dict[str, Any] | None

    def explain(self) -> str:
        return f"exit code {self.returncode}; output tail:\n{self.output[-6000:]}"


def wait_for(proc: subprocess.Popen[bytes], *, timeout: float, log: Path) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        raise AssertionError(f"the process did not end within {timeout:.0f}s (a hang); log tail:\n"
                             f"{log.read_text(errors='replace')[-6000:]}") from None


class JobHarness:
    """One job's directories (output, checkpoints, store) and ways to run its driver."""

    def __init__(self, base: Path, *, name: str = "job") -> None:
        self.base = base
        self.name = name
        self.uid = uuid.uuid4().hex[:8]
        self.output = base / "output"
        self.checkpoints = base / "checkpoints"
        self.store = base / "store"
        self.faults_dir = base / "faults"
        self.faults_dir.mkdir(parents=True, exist_ok=True)
        self.runs = 0

    # ------------------------------------------------------------------ driver

    def driver_args(self, *, entrypoint: str, args: dict[str, Any], attempt: int,
                    parallelism: int = 2, storage: str | None = None,
                    master: str = "local[2]", python_path: list[str] | None = None,
                    extra: list[str] | None = None) -> list[str]:
        paths = [str(JOBS)] if python_path is None else python_path
        return [
            "--job-name", self.name, "--job-uid", self.uid, "--entrypoint", entrypoint,
            *[arg for path in paths for arg in ("--python-path", path)],
            "--args-json", json.dumps(args),
            "--parallelism", str(parallelism), "--master", master,
            "--checkpoint-storage", storage or self.checkpoints.as_uri(),
            "--checkpoint-interval", "0.5", "--store", f"file:{self.store}",
            "--attempt", str(attempt), "--status-file", str(self.status_path(attempt)),
            *(extra or []),
        ]

    def crash_after_a_checkpoint(self, *, at: int) -> dict[str, Any]:
        """Job args that kill a subtask once, at the first batch from click ``at`` on
        that follows a completed checkpoint (``window_jobs.slow_or_crash``), with the
        marker the test checks at ``base/crashed``."""
        return {"crash_at": at, "crash_marker": str(self.base / "crashed"),
                "crash_after_checkpoint_in": str(self.store)}

    def status_path(self, attempt: int) -> Path:
        return self.base / f"status-{attempt}.json"

    def log_path(self, attempt: int) -> Path:
        return self.base / f"driver-{attempt}.log"

    def start(self, *, entrypoint: str, args: dict[str, Any], attempt: int = 1,
              env: dict[str, str] | None = None, launcher: list[str] | None = None,
              **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a driver; ``launcher`` replaces ``python -m job_runtime`` (a test
        that changes the runtime in the driver process)."""
        command = [*(launcher or [sys.executable, "-m", "job_runtime"]), "run",
                   *self.driver_args(entrypoint=entrypoint, args=args, attempt=attempt,
                                     **kwargs)]
        full_env = runtime_env({"CJOB_FAULTS_DIR": str(self.faults_dir), **(env or {})})
        with open(self.log_path(attempt), "wb") as log:
            # Its own session, as a pod: a driver fault kills the JVM and workers too.
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                    env=full_env, cwd=self.base, start_new_session=True)

    def finish(self, proc: subprocess.Popen[bytes], *, attempt: int,
               timeout: float = RUN_TIMEOUT) -> Finished:
        returncode = wait_for(proc, timeout=timeout, log=self.log_path(attempt))
        reap(proc.pid)
        return Finished(returncode=returncode,
                        output=self.log_path(attempt).read_text(errors="replace"),
                        status=self.read_status(attempt))

    def run(self, *, entrypoint: str, args: dict[str, Any], attempt: int = 1,
            env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT,
            **kwargs: Any) -> Finished:
        proc = self.start(entrypoint=entrypoint, args=args, attempt=attempt, env=env,
                          **kwargs)
        return self.finish(proc, attempt=attempt, timeout=timeout)

    def restart_at_three_after_a_driver_kill(
            self, *, entrypoint: str, args: dict[str, Any],
            env: dict[str, str] | None = None) -> Finished:
        """The rescale every capability is tried with: a first attempt at two subtasks
        whose driver is killed after checkpoint 3 was recorded and before its sinks
        heard of it, then a second at three subtasks restored from that checkpoint;
        the second's result, once both ended as they must."""
        first = self.run(entrypoint=entrypoint, args=args,
                         env={"CJOB_FAULTS": "driver.before-notify@3", **(env or {})})
        assert first.returncode == -9, first.explain()
        second = self.run(entrypoint=entrypoint, args=args, attempt=2, parallelism=3,
                          master="local[3]", extra=["--restore", "latest"])
        assert second.returncode == 0, second.explain()
        assert second.status is not None and second.status["restoredFrom"]["id"] == 3, \
            second.explain()
        return second

    def read_status(self, attempt: int) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.status_path(attempt).read_text())
        except (OSError, ValueError):
            return None
        return data

    def wait_status(self, attempt: int, condition: Callable[[dict[str, Any]], bool], *,
                    proc: subprocess.Popen[bytes], what: str,
                    timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.read_status(attempt)
            if status is not None and condition(status):
                return status
            if proc.poll() is not None:
                raise AssertionError(f"the driver ended (exit {proc.returncode}) before {what}:"
                                     f"\n{self.log_path(attempt).read_text()[-6000:]}")
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting until {what}")

    # ------------------------------------------------------------------ output

    def output_records(self) -> list[dict[str, Any]]:
        return read_output(self.output)

    def running_sum_problems(self, *, count: int) -> list[str]:
        """What the running-sum example's verifier finds wrong (empty: exactly once)."""
        verify = load_example("examples/running_sum/verify.py")
        problems: list[str] = verify.verify(self.output_records(), count=count)
        return problems


def read_output(directory: Path) -> list[dict[str, Any]]:
    """The records a files sink made visible: names not starting with ``.`` or ``_``."""
    records: list[dict[str, Any]] = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith((".", "_")) or not path.is_file():
            continue
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return records


def reap(pgid: int) -> None:
    """Nothing of a driver's session (JVM, Python workers) may outlive a test."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------- embedded runner


@dataclasses.dataclass(frozen=True)
class EmbeddedRun:
    returncode: int
    output: str
    state_dir: Path
    name: str

    @property
    def job_dir(self) -> Path:
        return self.state_dir / self.name

    @property
    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.job_dir / "status.json").read_text())
        return data

    def attempt_progress(self, attempt: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.job_dir / f"attempt-{attempt}.progress.json").read_text())
        return data

    def attempt_log(self, attempt: int) -> str:
        return (self.job_dir / f"attempt-{attempt}.log").read_text(errors="replace")

    def explain(self) -> str:
        logs = sorted(self.job_dir.glob("attempt-*.log"))
        tail = logs[-1].read_text(errors="replace")[-4000:] if logs else ""
        return f"exit {self.returncode}\n{self.output[-3000:]}\nlast driver log:\n{tail}"


def write_job_yaml(path: Path, *, name: str, entrypoint: str, python_path: list[str],
                   args: dict[str, Any], parallelism: int = 2, max_restarts: int = 5,
                   checkpoint: dict[str, Any] | None = None,
                   health: dict[str, Any] | None = None,
                   image: str | None = "checkpointed-jobs/runtime:test") -> Path:
    """A CheckpointedJob for ``cjob run``; ``image=None`` leaves ``spec.image`` out."""
    document: dict[str, Any] = {
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": name},
        "spec": {
            **({"image": image} if image is not None else {}),
            "job": {"entrypoint": entrypoint, "pythonPath": python_path, "args": args},
            "parallelism": parallelism,
            "spark": {"master": f"local[{parallelism}]"},
            "checkpoint": {"storage": "file:///unused", "interval": "500ms", "retained": 3,
                           **(checkpoint or {})},
            "restartPolicy": {"type": "OnFailure", "maxRestarts": max_restarts,
                              "backoff": {"initial": "1s", "max": "2s"}},
            **({"health": health} if health is not None else {}),
        },
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def run_embedded(job_file: Path, *, state_dir: Path, name: str, env: dict[str, str] | None = None,
                 extra: list[str] | None = None, timeout: float = 600.0) -> EmbeddedRun:
    log = state_dir.parent / f"{state_dir.name}-runner.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cjob", "run", str(job_file), "--state-dir", str(state_dir),
             "--fresh", *(extra or [])],
            stdout=out, stderr=subprocess.STDOUT, env=runtime_env(env), cwd=REPO,
            start_new_session=True)
        returncode = wait_for(proc, timeout=timeout, log=log)
    reap(proc.pid)
    return EmbeddedRun(returncode=returncode, output=log.read_text(errors="replace"),
                       state_dir=state_dir, name=name)


def write_completed_checkpoints(storage: Any, store: Any, ids: list[int], *,
                                job: str) -> None:
    """Checkpoints ``ids`` of ``job`` as a driver completes them: a readable
    ``_metadata`` in ``storage``, then its pointer added to ``store``."""
    from cjob_checkpoint.metadata import CheckpointMetadata
    from cjob_checkpoint.store.completed_store import CompletedCheckpoint

    for checkpoint_id in ids:
        metadata = CheckpointMetadata(job=job, checkpoint_id=checkpoint_id, timestamp=1.0,
                                      final=False, attempt=1, parallelism=1,
                                      max_parallelism=128)
        path = storage.write_metadata(checkpoint_id, metadata.to_bytes())
        store.add_checkpoint_and_subsume_oldest(
            CompletedCheckpoint(checkpoint_id=checkpoint_id, metadata_path=path, timestamp=1.0),
            discard=storage.discard)
