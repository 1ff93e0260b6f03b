"""The operator's executor carries out every kind of action the lifecycle has, and an
action of no kind it knows stops the pass instead of being dropped unseen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pytest
from action_examples import KINDS, one_of_each
from cjob_operator.config import OperatorConfig
from cjob_operator.executor import ActionExecutor
from fake_cluster import FakeCluster, job_document

from cjob_lifecycle.actions import Action
from cjob_spec import CheckpointedJob, parse_job


@dataclass(frozen=True)
class Unplanned:
    """Stands for a kind of action the executor was never taught."""


def executor() -> tuple[ActionExecutor, FakeCluster, CheckpointedJob]:
    cluster = FakeCluster()
    job = parse_job(job_document(spark={"master": "k8s", "executor": {"instances": 2}}))
    return (ActionExecutor(cluster=cluster, operator_config=OperatorConfig(), reuse_seconds=0.0),
            cluster, job)


class TestEveryKindOfAction:
    """Each kind has its case; the type checker proves it, these tests show it."""

    def test_the_examples_cover_every_kind_of_action(self) -> None:
        assert {type(action) for action in one_of_each("sums")} == KINDS

    def test_the_operator_carries_out_every_kind(self) -> None:
        subject, cluster, job = executor()
        report = subject.execute(one_of_each(job.metadata.name), job=job)
        assert report.error is None and report.executed == tuple(one_of_each(job.metadata.name))
        assert report.finalized
        # One API call per action, but for the finalizer and the requeue (the caller's).
        assert cluster.calls == [
            "ensure_checkpoint_configmap(sums-checkpoints)", "ensure_object(ServiceAccount)",
            "ensure_object(Role)", "ensure_object(RoleBinding)", "ensure_object(Service)",
            "ensure_object(NetworkPolicy)", "ensure_object(Secret)", "advance_fence(1)",
            "create_pod(sums-attempt-1)", "create_pod(sums-standby-1)",
            "request_checkpoint(sums-checkpoints, n1)", "advance_fence(2)",
            "promote_standby(sums-standby-1, 2)", "delete_pod(sums-attempt-1)",
            "post_event(Started)", "delete_pod(sums-attempt-1-exec-1)",
            "create_pod(sums-cleanup)", "delete_pod(sums-cleanup)",
            "create_snapshot(sums-s-20260101000000)", "delete_snapshot(sums-s-20250101000000)",
            "retain_configmap(sums-checkpoints)", "delete_configmap(sums-checkpoints)",
        ]

    def test_an_action_of_no_known_kind_fails_loudly(self) -> None:
        subject, cluster, job = executor()
        with pytest.raises(AssertionError, match="Unplanned"):
            subject.execute([cast(Action, Unplanned())], job=job)
        assert cluster.calls == []
