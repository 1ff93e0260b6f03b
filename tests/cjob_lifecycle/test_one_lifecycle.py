"""``cjob run`` and the operator go through the same lifecycle for the same driver outcomes.

The embedded runner runs real local processes (a scripted stand-in for the driver,
``stub_driver.py``) against a real file store; the operator's side is the same plan
fed with driver pods built by the operator's pod builder and read back by its pod
reader, on a simulated clock. Both must pass through the same phases with the same
reasons and end with the same status: the embedded runner has no state machine of
its own any more.
"""

from __future__ import annotations

import io
import json
import sys
import textwrap
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cjob_operator.builders import build_driver_pod
from cjob_operator.config import OperatorConfig
from cjob_operator.observed import observe_driver_pod
from paths import SUPPORT

from cjob.embedded import EmbeddedRunner, RunOptions, resumed_status
from cjob_lifecycle.actions import (
    AdvanceFence,
    CreateDriver,
    DeleteDriver,
    EnsureCheckpointConfigMap,
)
from cjob_lifecycle.observed import Observed, StoreView
from cjob_lifecycle.plan import PlanSettings, plan
from cjob_spec import CheckpointedJob, JobStatus, Phase, load_job_file

STUB = SUPPORT / "stub_driver.py"
RUN_SECONDS = 2.0
"""How long every scripted driver runs before it ends (long enough to be seen running)."""


def write_job(tmp_path: Path, *, max_restarts: int = 3, policy: str = "OnFailure") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: checkpointed.io/v1alpha1
        kind: CheckpointedJob
        metadata:
          name: demo
          uid: uid-1
        spec:
          job:
            entrypoint: job:build
          parallelism: 1
          spark: {{master: "local[1]"}}
          checkpoint:
            storage: file:///unused
            interval: 1s
          restartPolicy: {{type: {policy}, maxRestarts: {max_restarts}, backoff: {{initial: 1s, max: 1s}}}}
        """))
    return path


class RecordingRunner(EmbeddedRunner):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statuses: list[JobStatus] = []

    def status_changed(self, status: JobStatus) -> None:
        self.statuses.append(status)


@dataclass
class LocalRun:
    code: int
    output: str
    statuses: list[JobStatus]
    state_dir: Path

    @property
    def status_file(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / "demo" / "status.json").read_text())
        return data


def run_locally(tmp_path: Path, *, exits: str, fresh: bool = True,
                monkeypatch: pytest.MonkeyPatch, **job: Any) -> LocalRun:
    monkeypatch.setenv("STUB_EXITS", exits)
    monkeypatch.setenv("STUB_SECONDS", str(RUN_SECONDS))
    out = io.StringIO()
    state_dir = tmp_path / "state"
    runner = RecordingRunner(
        job=load_job_file(str(write_job(tmp_path, **job))),
        options=RunOptions(state_dir=str(state_dir), fresh=fresh, out=out,
                           base_dir=str(tmp_path),
                           driver_command=(sys.executable, str(STUB))))
    code = runner.run()
    return LocalRun(code=code, output=out.getvalue(), statuses=runner.statuses,
                    state_dir=state_dir)


def run_on_the_operator(job: CheckpointedJob, *, exits: str) -> list[JobStatus]:
    """The operator's side: the same plan, driver pods as the API server would show them."""
    codes = [int(code) for code in exits.split(",")]
    config = OperatorConfig()
    now = datetime(2024, 5, 1, 12, tzinfo=UTC)
    status = JobStatus()
    pods: dict[str, dict[str, Any]] = {}
    ends: dict[str, tuple[datetime, int]] = {}
    fence = 0
    store = False
    statuses: list[JobStatus] = []
    for _ in range(100):
        observed = Observed(
            job=job, status=status, default_image="runtime:1",
            pods=tuple(pod for m in pods.values() if (pod := observe_driver_pod(m))),
            store=StoreView(exists=store, fence_attempt=fence))
        result = plan(observed, now=now, settings=PlanSettings())
        wake = [now + timedelta(seconds=result.requeue_after or 3600)]
        for action in result.actions:
            if isinstance(action, EnsureCheckpointConfigMap):
                store = True
            elif isinstance(action, AdvanceFence):
                fence = action.attempt
            elif isinstance(action, CreateDriver):
                manifest = build_driver_pod(job, attempt=action.attempt,
                                            restore_pointer=action.restore_pointer,
                                            image=action.image, operator_config=config)
                manifest["metadata"]["creationTimestamp"] = now
                manifest["status"] = {"phase": "Pending"}
                pods[action.name] = manifest
                code = codes[min(action.attempt, len(codes)) - 1]
                ends[action.name] = (now + timedelta(seconds=RUN_SECONDS), code)
                wake.append(now + timedelta(seconds=0.1))  # the kubelet starts it
            elif isinstance(action, DeleteDriver):
                pods.pop(action.name, None)
        if result.status != status:
            statuses.append(result.status)
        status = result.status
        if status.phase is not None and status.phase.is_terminal:
            return statuses
        wake += [end for end, _ in ends.values() if end > now]
        now = min(wake)
        for name, manifest in pods.items():  # what the kubelet reports by then
            end, code = ends[name]
            created = manifest["metadata"]["creationTimestamp"]
            if now >= end:
                manifest["status"] = {"phase": "Succeeded" if code == 0 else "Failed",
                                      "containerStatuses": [{"name": "driver", "state": {
                                          "terminated": {"exitCode": code, "startedAt": created,
                                                         "finishedAt": end}}}]}
            elif now > created:
                manifest["status"] = {"phase": "Running", "containerStatuses": [
                    {"name": "driver", "state": {"running": {"startedAt": created}}}]}
    raise AssertionError("the operator's side did not finish")


def phases(statuses: list[JobStatus]) -> list[tuple[str, str | None]]:
    """The (phase, reason) steps a job went through, repeats collapsed."""
    steps: list[tuple[str, str | None]] = []
    for status in statuses:
        step = (status.phase.value if status.phase else "-", status.reason)
        if not steps or steps[-1] != step:
            steps.append(step)
    return steps


def outcome(status: JobStatus) -> dict[str, Any]:
    failure = status.last_failure
    return {
        "phase": status.phase,
        "reason": status.reason,
        "attempt": status.attempt,
        "restarts": status.restarts,
        "lastFailure": None if failure is None else (failure.reason, failure.exit_code),
        "conditions": sorted((c.type.value, c.status.value, c.reason)
                             for c in status.conditions),
    }


SCENARIOS = {
    "the driver exits 0": ("0", {}),
    "the driver is killed, then exits 0": ("137,0", {}),
    "the driver fails permanently (user code)": ("3", {}),
    "the driver keeps failing past maxRestarts": ("1", {"max_restarts": 1}),
    "the driver fails under restart policy Never": ("1", {"policy": "Never"}),
}


class TestTheSameDriverOutcomesLeadToTheSameLifecycle:
    @pytest.mark.parametrize("exits, job", SCENARIOS.values(), ids=SCENARIOS.keys())
    def test_the_runner_passes_through_the_operators_phases_and_ends_in_its_status(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exits: str,
            job: dict[str, Any]) -> None:
        local = run_locally(tmp_path, exits=exits, monkeypatch=monkeypatch, **job)
        plan_job = load_job_file(str(write_job(tmp_path, **job)))
        cluster = run_on_the_operator(plan_job, exits=exits)

        assert phases(local.statuses) == phases(cluster)
        assert outcome(local.statuses[-1]) == outcome(cluster[-1])
        final = local.statuses[-1]
        assert local.code == (0 if final.phase is Phase.SUCCEEDED else 1)
        assert local.status_file["phase"] == final.phase.value if final.phase else False


class TestTheRunnersOwnBehaviour:
    def test_a_killed_driver_is_reported_and_the_next_attempt_restores_the_latest(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        local = run_locally(tmp_path, exits="137,0", monkeypatch=monkeypatch)
        assert "attempt 1 failed: " in local.output
        assert "exit code 137" in local.output
        assert "starting attempt 2 (restore: latest" in local.output
        assert local.status_file["restarts"] == 1
        assert local.status_file["lastFailure"]["exitCode"] == 137

    def test_every_attempt_starts_only_after_the_store_is_fenced_to_it(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # The stub exits 9 when the store's fence is not its own attempt.
        local = run_locally(tmp_path, exits="1,1,0", monkeypatch=monkeypatch)
        assert local.code == 0, local.output
        assert (tmp_path / "state" / "demo" / "store" / "attempt").read_text().strip() == "3"

    def test_running_again_after_an_interrupted_run_continues_with_the_next_attempt(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        job_dir = tmp_path / "state" / "demo"
        (job_dir / "store").mkdir(parents=True)
        (job_dir / "store" / "attempt").write_text("2\n")
        (job_dir / "uid").write_text(uuid.uuid4().hex[:12])
        interrupted = JobStatus(phase=Phase.RUNNING, attempt=2, restarts=1,
                                driver_pod="demo-attempt-2", reason="Running")
        (job_dir / "status.json").write_text(json.dumps(interrupted.to_dict()))

        local = run_locally(tmp_path, exits="0", fresh=False, monkeypatch=monkeypatch)

        assert local.code == 0, local.output
        assert "resuming demo" in local.output
        assert "starting attempt 3" in local.output
        assert local.status_file["attempt"] == 3
        assert local.status_file["restarts"] == 1
        assert local.status_file["phase"] == "Succeeded"


class TestResumedStatus:
    @pytest.mark.parametrize("phase", [Phase.PENDING, Phase.RUNNING, Phase.FAILED])
    def test_an_unfinished_attempt_becomes_a_restart_without_backoff(self, phase: Phase
                                                                     ) -> None:
        resumed = resumed_status(JobStatus(phase=phase, attempt=4, restarts=2))
        assert resumed.phase is Phase.RESTARTING
        assert resumed.next_restart_at is None
        assert resumed.restarts == 2

    @pytest.mark.parametrize("phase", [Phase.RESTARTING, Phase.SUSPENDED])
    def test_a_waiting_or_suspended_job_is_left_to_the_plan(self, phase: Phase) -> None:
        previous = JobStatus(phase=phase, attempt=4, restarts=2)
        assert resumed_status(previous) == previous
