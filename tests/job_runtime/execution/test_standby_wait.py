"""A standby driver's wait: promoted by a typed file, never by a guess, never orphaned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from runtime_harness import REPO, runtime_env

from cjob_spec.model import CheckpointMode
from cjob_spec.standby_signal import (
    SUPERVISOR_PID_ENV,
    StandbyPromotion,
    StandbyReady,
    StandbySignalError,
    read_ready,
    ready_path,
    write_signal,
)
from job_runtime.coordinator.endpoint import CoordinatorEndpoint
from job_runtime.errors import ConfigurationError
from job_runtime.execution.config import SubtaskConfig
from job_runtime.execution.driver.barrier_stage import BarrierStage
from job_runtime.execution.driver.exit_codes import exit_code
from job_runtime.execution.driver.relaunch import RelaunchBudget
from job_runtime.execution.driver.standby import (
    ParkedStage,
    ParkedStageEnded,
    park_stage,
    wait_for_promotion,
)
from job_runtime.execution.driver.store import StoreAddress


def test_the_standby_takes_the_attempt_and_restore_point_its_promotion_names(
        tmp_path: Path) -> None:
    path = tmp_path / "standby.promote"
    promotion = StandbyPromotion(attempt=4, restore="latest", status_file="/s/a-4.json")
    writer = threading.Timer(0.2, write_signal, args=(path, promotion))
    writer.start()
    try:
        assert wait_for_promotion(str(path), rewarm=lambda: None) == promotion
    finally:
        writer.cancel()


def test_a_promotion_of_an_unknown_format_version_is_refused_with_a_sentence(
        tmp_path: Path) -> None:
    path = tmp_path / "standby.promote"
    path.write_text(json.dumps({"version": 2, "attempt": 4, "restore": "latest"}))
    with pytest.raises(ConfigurationError, match="format version 2"):
        wait_for_promotion(str(path), rewarm=lambda: None)


@pytest.mark.parametrize("body", [{"version": 1, "attempt": 0, "restore": "latest"},
                                  {"version": 1, "attempt": "2", "restore": "latest"},
                                  {"version": 1, "attempt": 2, "restore": ""}])
def test_a_promotion_without_a_usable_attempt_or_restore_point_is_refused(
        tmp_path: Path, body: dict[str, object]) -> None:
    path = tmp_path / "standby.promote"
    path.write_text(json.dumps(body))
    with pytest.raises(ConfigurationError, match="--standby"):
        wait_for_promotion(str(path), rewarm=lambda: None)


def test_readiness_round_trips_and_half_written_files_are_never_read(tmp_path: Path) -> None:
    promotion = tmp_path / "standby.promote"
    assert read_ready(ready_path(promotion)) is None
    write_signal(ready_path(promotion), StandbyReady(pid=7, ready_at=1.5))
    assert read_ready(ready_path(promotion)) == StandbyReady(pid=7, ready_at=1.5)
    assert [p.name for p in tmp_path.iterdir()] == ["standby.promote.ready"]
    ready_path(promotion).write_text("{")
    with pytest.raises(StandbySignalError, match="not valid JSON"):
        read_ready(ready_path(promotion))


def test_a_standby_whose_supervisor_is_gone_exits_instead_of_waiting_forever(
        tmp_path: Path) -> None:
    """Even when the supervisor died before the standby began to wait (a standby spends
    seconds starting Spark first): the standby knows its supervisor from the runner,
    not from whichever process is its parent when it begins to wait."""
    pid_file = tmp_path / "waiter.pid"
    waiter = textwrap.dedent(f"""\
        import os, time
        from job_runtime.execution.driver.standby import wait_for_promotion
        parent = os.getppid()
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        while os.getppid() == parent:  # starting Spark while the supervisor dies
            time.sleep(0.01)
        wait_for_promotion({str(tmp_path / "never.promote")!r}, rewarm=lambda: None)
        """)
    # The supervisor starts the waiter as cjob run starts a standby, and dies at once,
    # leaving it orphaned.
    supervisor = textwrap.dedent(f"""\
        import os, subprocess, sys, time
        env = dict(os.environ, {SUPERVISOR_PID_ENV}=str(os.getpid()))
        subprocess.Popen([sys.executable, "-c", {waiter!r}], env=env)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.01)
        """)
    subprocess.run([sys.executable, "-c", supervisor], cwd=REPO, env=runtime_env(None),
                   check=True, timeout=60)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the orphaned standby kept waiting"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_standby_pod_needs_a_configmap_store_and_says_so() -> None:
    from job_runtime.execution.driver.driver_settings import DriverSettings
    from job_runtime.execution.driver.standby import standby_channel

    settings = DriverSettings(job_name="j", job_uid="u", entrypoint="m:f",
                              store=StoreAddress.parse("file:/tmp/s"),
                              standby_pod="j-standby-1")
    with pytest.raises(ConfigurationError, match=r"--standby-pod.*configmap:NAMESPACE/NAME"):
        standby_channel(settings)


def test_a_standby_pods_relative_readiness_file_is_in_the_temporary_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from job_runtime.execution.driver.driver_settings import DriverSettings
    from job_runtime.execution.driver.standby import standby_channel

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    kubeconfig = tmp_path / "kubeconfig"  # the watch is only built here, never opened
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    settings = DriverSettings(job_name="j", job_uid="u", entrypoint="m:f",
                              store=StoreAddress.parse("configmap:team/j-checkpoints"), attempt=3,
                              standby_pod="j-standby-2", standby_ready_file="ready")
    channel = standby_channel(settings)
    assert channel.ready_file == str(tmp_path / "ready")
    assert channel.setting == "--standby-pod"
    assert channel.source.where == "configmap:team/j-checkpoints"


class _FailingSpark:
    """A SparkContext whose every job fails the way a launch fails when a subtask died."""

    def parallelize(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("Job aborted due to stage failure: Task 0 in stage 3.0 failed")


def _config(epoch: int) -> SubtaskConfig:
    return SubtaskConfig(
        job_id="j", job_name="j", entrypoint="m:f", python_path=(), args={}, parallelism=2,
        max_parallelism=128, coordinator_host="127.0.0.1", coordinator_port=1,
        checkpoint_root="", staging_uri="", mode=CheckpointMode.EXACTLY_ONCE, unaligned=False,
        epoch=epoch)


def _parked(*, launches: int, relaunched: list[int]) -> ParkedStage:
    def relaunch(epoch: int) -> BarrierStage:
        relaunched.append(epoch)
        stage = BarrierStage(spark_context=_FailingSpark(), config=_config(epoch))
        stage.start()
        return stage

    return ParkedStage(BarrierStage(spark_context=_FailingSpark(), config=_config(1)),
                       relaunch=relaunch, budget=RelaunchBudget(launches=launches))


def test_a_standby_whose_parked_stage_fails_on_every_launch_ends_with_sparks_reason() -> None:
    endpoint = CoordinatorEndpoint(host="127.0.0.1", key=b"k" * 32)
    relaunched: list[int] = []
    try:
        with pytest.raises(ParkedStageEnded, match="a launch of the barrier stage failed") \
                as raised:
            park_stage(_parked(launches=3, relaunched=relaunched), endpoint=endpoint,
                       parallelism=2)
        assert "Task 0 in stage 3.0 failed" in str(raised.value.cause)
        assert exit_code(raised.value.cause) == 1
        assert relaunched == [2, 3], "a failed parked launch is launched again, as budgeted"
    finally:
        endpoint.stop()
