"""Metrics, command line, kopf settings and the per-job loop, without a cluster."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest
from cjob_operator.api import merge_patch
from cjob_operator.loops import LoopSettings, Wakeups, run_job_loop
from cjob_operator.metrics import OperatorMetrics
from cjob_operator.options import parse_options
from cjob_operator.reconcile import Outcome
from cjob_operator.startup import FINALIZER, apply_settings
from prometheus_client import generate_latest

from cjob_spec.status import Phase

# --- metrics ---------------------------------------------------------------------------


def scrape(metrics: OperatorMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_the_metrics_have_the_documented_names_and_labels() -> None:
    metrics = OperatorMetrics(clock=lambda: 1000.0)
    metrics.record_job(namespace="team", name="sums", phase=Phase.RUNNING,
                       latest_completed_at=990.0, store_bytes=2048)
    metrics.record_job(namespace="team", name="other", phase=None,
                       latest_completed_at=None, store_bytes=None)
    metrics.count_restart(reason="Killed")
    metrics.count_restore()
    metrics.reconcile_seconds.observe(0.02)
    text = scrape(metrics)
    assert 'cjob_operator_jobs{phase="Running"} 1.0' in text
    assert 'cjob_operator_jobs{phase="Unknown"} 1.0' in text
    assert 'cjob_operator_jobs{phase="Failed"} 0.0' in text
    assert 'cjob_operator_restarts_total{reason="Killed"} 1.0' in text
    assert "cjob_operator_restore_total 1.0" in text
    assert "cjob_operator_reconcile_seconds_count 1.0" in text
    assert 'cjob_operator_latest_checkpoint_age_seconds{cjob_job="sums",namespace="team"} 10.0' in text
    assert 'cjob_operator_checkpoint_store_bytes{cjob_job="sums",namespace="team"} 2048.0' in text
    assert 'cjob_job="other"' not in text, "no checkpoint, no age"


def test_every_reason_a_restart_is_counted_under_is_served_at_zero_before_the_first() -> None:
    """Prometheus' increase() starts from a series' first sample: a counter that appears
    at 1 hides the restart that created it from the restarts alert."""
    metrics = OperatorMetrics(clock=lambda: 1000.0)
    text = scrape(metrics)
    for reason in ("Killed", "DriverFailed", "StorageUnreachable", "CheckpointStalled",
                   "SinkStalled", "OOMKilled", "NodeLost", "Upgraded", "Retrying"):
        assert f'cjob_operator_restarts_total{{reason="{reason}"}} 0.0' in text, reason
    metrics.count_restart(reason="ImagePullBackOff")  # a kubelet's reason: counted as well
    assert 'cjob_operator_restarts_total{reason="ImagePullBackOff"} 1.0' in scrape(metrics)


def test_a_job_not_meant_to_checkpoint_serves_no_checkpoint_age() -> None:
    """A suspended, finished or failed job takes no checkpoints: an age that kept
    growing would page someone about a job that is fine (or has its own alert)."""
    metrics = OperatorMetrics(clock=lambda: 1000.0)
    for name, phase in (("paused", Phase.SUSPENDED), ("done", Phase.SUCCEEDED),
                        ("broken", Phase.FAILED), ("waiting", Phase.RESTARTING),
                        ("sums", Phase.RUNNING)):
        metrics.record_job(namespace="team", name=name, phase=phase,
                           latest_completed_at=400.0, store_bytes=100)
    ages = [line for line in scrape(metrics).splitlines()
            if line.startswith("cjob_operator_latest_checkpoint_age_seconds{")]
    assert sorted(ages) == [
        'cjob_operator_latest_checkpoint_age_seconds{cjob_job="sums",namespace="team"} 600.0',
        'cjob_operator_latest_checkpoint_age_seconds{cjob_job="waiting",namespace="team"} 600.0',
    ]


def test_the_checkpoint_age_grows_between_passes() -> None:
    now = [1000.0]
    metrics = OperatorMetrics(clock=lambda: now[0])
    metrics.record_job(namespace="team", name="sums", phase=Phase.RUNNING,
                       latest_completed_at=990.0, store_bytes=None)
    now[0] = 1060.0
    assert 'cjob_operator_latest_checkpoint_age_seconds{cjob_job="sums",namespace="team"} 70.0' in (
        scrape(metrics)
    )


# --- command line ----------------------------------------------------------------------


def test_the_chart_flags_parse() -> None:
    options = parse_options(["--namespace", "a", "--namespace", "b", "--metrics-port", "9000",
                             "--health-port", "9001", "--peering", "cjob", "--verbose"])
    assert options.namespaces == ("a", "b")
    assert options.metrics_port == 9000
    assert options.liveness_endpoint == "http://0.0.0.0:9001/healthz"
    assert options.peering == "cjob" and not options.standalone
    assert options.verbose


def test_port_zero_disables_metrics_and_health() -> None:
    options = parse_options(["--all-namespaces", "--metrics-port", "0", "--health-port", "0",
                             "--standalone"])
    assert options.all_namespaces and options.standalone
    assert options.metrics_port is None and options.liveness_endpoint is None


def test_peering_replicas_draw_different_priorities_unless_told() -> None:
    drawn = {parse_options(["--namespace", "a", "--peering", "p"]).priority for _ in range(20)}
    assert len(drawn) > 1 and min(drawn) > 0
    assert parse_options(["--namespace", "a", "--peering", "p", "--priority", "7"]).priority == 7


def test_a_status_patch_turns_the_old_status_into_exactly_the_new_one() -> None:
    old = {"phase": "Running", "lastFailure": {"reason": "Killed", "exitCode": 137},
           "conditions": [{"type": "Ready"}], "message": "x"}
    new = {"phase": "Pending", "lastFailure": {"reason": "DriverPodMissing"},
           "conditions": [{"type": "Failed"}]}
    assert merge_patch(old, new) == {
        "phase": "Pending",
        "lastFailure": {"reason": "DriverPodMissing", "exitCode": None},
        "conditions": [{"type": "Failed"}],
        "message": None,
    }


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--namespace", "a", "--all-namespaces"],
        ["--namespace", "a", "--peering", "p", "--standalone"],
        ["--namespace", "a", "--metrics-port", "70000"],
        ["--namespace", "a", "--metrics-port", "http"],
    ],
    ids=["no-scope", "both-scopes", "peering-and-standalone", "port-range", "port-text"],
)
def test_contradictory_or_bad_flags_are_refused_with_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options(argv)
    assert exit_info.value.code == 2
    assert "usage:" in capsys.readouterr().err


# --- kopf settings -----------------------------------------------------------------------


def test_kopf_leaves_only_checkpointed_io_marks_on_objects() -> None:
    settings = kopf.OperatorSettings()
    apply_settings(settings, options=parse_options(["--namespace", "a", "--standalone"]))
    assert settings.persistence.finalizer == FINALIZER == "checkpointed.io/finalizer"
    progress = settings.persistence.progress_storage
    assert isinstance(progress, kopf.AnnotationsProgressStorage)
    assert progress.prefix == "checkpointed.io"
    assert settings.persistence.diffbase_storage.prefix == "checkpointed.io"  # type: ignore[attr-defined]
    assert settings.posting.level == logging.WARNING
    assert settings.peering.standalone


def test_peering_names_the_peering_object_and_makes_it_mandatory() -> None:
    settings = kopf.OperatorSettings()
    apply_settings(settings, options=parse_options(["--namespace", "a", "--peering", "cjob"]))
    assert settings.peering.name == "cjob"
    assert settings.peering.mandatory and not settings.peering.standalone


def test_pods_and_configmaps_are_watched_with_server_side_selectors() -> None:
    settings = kopf.OperatorSettings()
    apply_settings(settings, options=parse_options(["--namespace", "a"]))
    selectors = {str(key): value for key, value in settings.watching.label_selectors.items()}
    # Drivers, standby drivers and the executors Spark creates (their index tells a job
    # whose executors cannot be placed), never cleanup pods.
    assert ("checkpointed.io/job,checkpointed.io/role in (driver,standby,executor)"
            in selectors.values())
    assert "checkpointed.io/job" in selectors.values()


def test_every_pod_role_a_handler_indexes_passes_the_server_side_selector() -> None:
    """A role the selector leaves out never reaches the operator, and its index stays
    empty without a word."""
    from cjob_operator import handlers, startup

    assert handlers.EXECUTOR_LABELS["checkpointed.io/role"] in startup.WATCHED_POD_ROLES
    assert set(startup.DRIVER_ROLES) <= set(startup.WATCHED_POD_ROLES)


# --- the per-job loop ----------------------------------------------------------------------


class ScriptedReconciler:
    """Returns prepared outcomes and records the pods each pass saw."""

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes
        self.passes: list[list[Any]] = []
        self.ran = asyncio.Event()

    def reconcile(self, *, namespace: str, name: str, pods: list[Any]) -> Outcome:
        self.passes.append(pods)
        return self.outcomes.pop(0)


class Flag:
    def __init__(self) -> None:
        self.value = False

    def __bool__(self) -> bool:
        return self.value

    def is_set(self) -> bool:
        return self.value


async def wait_for_passes(subject: ScriptedReconciler, count: int) -> None:
    for _ in range(500):
        if len(subject.passes) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"only {len(subject.passes)} passes")


def test_a_wake_up_runs_a_pass_at_once_with_the_current_pods() -> None:
    async def scenario() -> None:
        wakeups = Wakeups()
        pods: list[Any] = ["pod-1"]
        subject = ScriptedReconciler([Outcome(requeue_after=3600.0),
                                      Outcome(requeue_after=3600.0), Outcome(gone=True)])
        task = asyncio.create_task(run_job_loop(
            reconciler=subject, wakeups=wakeups, namespace="team", name="sums",  # type: ignore[arg-type]
            pods=lambda: list(pods), stopped=Flag(),
            settings=LoopSettings(settle_seconds=0.0)))
        await wait_for_passes(subject, 1)
        pods.append("pod-2")
        assert wakeups.wake("team", "sums")
        await wait_for_passes(subject, 2)
        assert subject.passes[1] == ["pod-1", "pod-2"]
        wakeups.wake("team", "sums")
        outcome = await asyncio.wait_for(task, timeout=5)
        assert outcome is not None and outcome.gone
        assert not wakeups.wake("team", "sums"), "an ended loop is unregistered"

    asyncio.run(scenario())


def test_the_requested_delay_runs_the_next_pass_without_news() -> None:
    async def scenario() -> None:
        subject = ScriptedReconciler([Outcome(requeue_after=0.05), Outcome(finalized=True)])
        outcome = await asyncio.wait_for(run_job_loop(
            reconciler=subject, wakeups=Wakeups(), namespace="team", name="sums",  # type: ignore[arg-type]
            pods=list, stopped=Flag()), timeout=5)
        assert outcome is not None and outcome.finalized
        assert len(subject.passes) == 2

    asyncio.run(scenario())


def test_the_operators_own_status_writes_do_not_wake_the_job() -> None:
    async def scenario() -> None:
        wakeups = Wakeups()
        event = wakeups.register(("team", "sums"))
        body: dict[str, Any] = {"metadata": {"namespace": "team", "name": "sums",
                                             "generation": 1}}
        assert wakeups.wake_on_job_change(body)
        event.clear()
        assert not wakeups.wake_on_job_change({**body, "status": {"phase": "Running"}})
        assert not event.is_set()
        body["metadata"]["generation"] = 2
        assert wakeups.wake_on_job_change(body)
        assert event.is_set()

    asyncio.run(scenario())
