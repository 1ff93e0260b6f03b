"""A long chaos run on a real node: a job with a warm standby, RocksDB state and
checkpoints on S3, and beside it a Kafka -> windowed count -> Kafka job, while the
first job's driver, executors and standby, the second's driver, the operator, the S3
server and the Kafka broker are killed at random; both outputs must still be
exactly-once (the second's read back ``read_committed`` and compared with counts
computed from its input), both jobs must finish, and every restart of the first
must show in its status and Events.

Ten minutes of chaos by default (``CJOB_CHAOS_SECONDS``), so not part of
``make test``: ``make test-chaos`` runs it. ``CJOB_CHAOS_SEED`` repeats a run's draws.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from typing import Any

import pytest
import yaml

from e2e.controlplane.waiting import pod_is_ready
from e2e.jobs import KAFKA_CLICKS_DIR, RUNNING_SUM_DIR, kafka_clicks_module
from e2e.kafka.clients import create_topic
from e2e.kind.chart import ChartRelease
from e2e.realnode import running_sum, scenario
from e2e.realnode.chaos_faults import Chaos
from e2e.realnode.chaos_tally import NOT_ATTEMPT_ENDS, SecondJob, Tally, job_events, recoveries
from e2e.realnode.chaos_watch import JobWatch
from e2e.realnode.cluster_s3 import ClusterS3
from e2e.realnode.kafka import ClusterKafka
from e2e.realnode.pytest_plugin import RealCluster

sys.path.insert(0, str(RUNNING_SUM_DIR))
from verify import verify

CHAOS_SECONDS = float(os.environ.get("CJOB_CHAOS_SECONDS", "600"))
RATE = 1_000
"""Records per second: slow enough for two cores that also run two drivers, four
executors, the operator, the S3 server and the control plane."""
LEAD_SECONDS = 150
"""Input beyond the chaos: the job starts reading about a minute before the chaos
(the standby must be Ready first), and must still be running when the chaos ends.
Every recovery adds to its run time (the source resumes at its rate, it does not
catch up), so it ends after the chaos, by this margin or more."""
COUNT = int(RATE * (CHAOS_SECONDS + LEAD_SECONDS))
MAX_RESTARTS = 1_000
"""Above any number of kills the chaos can draw: the budget is not what is tested."""

KAFKA_RATE = 100
"""Clicks per second the Kafka job reads (a delay per click over its two subtasks):
enough to keep it reading through the whole chaos, little enough for two cores."""
KAFKA_COUNT = int(KAFKA_RATE * (CHAOS_SECONDS + LEAD_SECONDS))
WINDOW_MS = 1_000

pytestmark = [pytest.mark.timeout(int(CHAOS_SECONDS) + 3600)]


def _kafka_job(*, name: str, bucket: str, s3: ClusterS3, kafka: ClusterKafka, clicks: str,
               counts: str) -> dict[str, Any]:
    """The click-count example in its window mode: Kafka in, counts per user and second
    of event time, Kafka out through transactions; Spark local in its driver pod (no
    executors: the node's two cores already run the first job's), checkpoints on S3."""
    manifest: dict[str, Any] = yaml.safe_load(
        (KAFKA_CLICKS_DIR / "kafka-clicks-cluster.yaml").read_text())
    manifest["metadata"]["name"] = name
    spec = manifest["spec"]
    spec["job"]["args"].update(bootstrap=kafka.cluster_bootstrap, input=clicks, output=counts,
                               window=f"{WINDOW_MS}ms", max_delay="1s", bounded=True,
                               delay=2 / KAFKA_RATE)
    spec["spark"] = {"master": "local[2]", "driver": {"cores": 1, "memory": "1Gi"},
                     "conf": {"spark.kubernetes.driver.request.cores": "300m"}}
    spec["checkpoint"].update(storage=f"s3://{bucket}/kafka-checkpoints",
                              s3=running_sum.s3_settings(s3), interval="2s",
                              tolerableFailures=30)
    spec["restartPolicy"].update(maxRestarts=MAX_RESTARTS, resetAfter="24h")
    return manifest


def _seed() -> int:
    """The run's seed: ``CJOB_CHAOS_SEED`` to repeat a run, else a fresh one (printed)."""
    given = os.environ.get("CJOB_CHAOS_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


def _chaos_job(*, name: str, bucket: str, s3: ClusterS3) -> dict[str, Any]:
    """The running sum as the chaos runs it: executors as pods, a warm standby,
    RocksDB state, checkpoints and output on S3.

    ``resetAfter`` is longer than the run, so ``status.restarts`` counts every restart
    of the run; ``tolerableFailures`` lets a checkpoint fail for about a minute while
    the S3 server restarts before the driver gives up (when it does, the restart that
    follows is one more to account for, and the tally names its reason)."""
    manifest = running_sum.manifest(
        name=name, storage=f"s3://{bucket}/checkpoints", output=f"s3://{bucket}/output",
        master="k8s", s3=running_sum.s3_settings(s3), count=COUNT, rate=RATE,
        pod={"volumes": [running_sum.CODE_VOLUME], "volumeMounts": [running_sum.CODE_MOUNT]},
    )  # fmt: skip
    spec = manifest["spec"]
    # Two CPUs for the whole node: two drivers and four executors ask for fractions of one.
    spec["spark"]["conf"]["spark.kubernetes.driver.request.cores"] = "300m"
    spec["checkpoint"].update(interval="2s", tolerableFailures=30)
    spec["state"] = {"backend": "rocksdb"}
    spec["standby"] = {"enabled": True}
    spec["restartPolicy"].update(maxRestarts=MAX_RESTARTS, resetAfter="24h")
    return manifest


def _started_attempts(events: list[Any]) -> list[int]:
    """The attempt each ``Restarted`` Event says was started, once per Event posted."""
    found: list[int] = []
    for event in events:
        if event.reason == "Restarted":
            match = re.search(r"\battempt (\d+)", event.message)
            assert match, event.message
            found.extend([int(match.group(1))] * event.count)
    return sorted(found)


def _names_driver(message: str, pod: str) -> bool:
    """Whether an attempt's end Event is about the driver pod ``pod`` (its messages
    begin ``driver pod <name> failed``, ``... is lost``, ``... disappeared``...)."""
    return f"driver pod {pod} " in message


def test_a_job_under_ten_minutes_of_random_kills_finishes_with_exactly_once_output(
    real_cluster: RealCluster,
    restricted_namespace: str,
    operator: ChartRelease,
    cluster_s3: ClusterS3,
    cluster_kafka: ClusterKafka,
    kubectl: scenario.Kubectl,
) -> None:
    seed = _seed()
    print(f"chaos seed {seed} (CJOB_CHAOS_SEED={seed} repeats its draws), "
          f"{CHAOS_SECONDS:.0f}s of chaos, {COUNT} records at {RATE}/s", flush=True)
    rest = real_cluster.rest()
    namespace = restricted_namespace
    name = "chaos"
    bucket = f"{name}-{namespace[-6:]}"
    scenario.bucket_with_credentials(kubectl=kubectl, s3=cluster_s3, namespace=namespace,
                                        bucket=bucket)
    running_sum.code_configmap(kubectl, namespace)
    kubectl("apply", "--namespace", namespace, "-f", "-",
            stdin=yaml.safe_dump(_chaos_job(name=name, bucket=bucket, s3=cluster_s3)))
    job = scenario.JobHandle(rest=rest, namespace=namespace, name=name)

    # The Kafka job: its input produced up front from the host, its output read back
    # read_committed from the host at the end.
    produce, kafka_verify = kafka_clicks_module("produce"), kafka_clicks_module("verify")
    bootstrap = cluster_kafka.host_bootstrap
    clicks_topic = create_topic(bootstrap=bootstrap, partitions=4, name=f"clicks-{bucket}")
    counts_topic = create_topic(bootstrap=bootstrap, partitions=4, name=f"counts-{bucket}")
    produce.produce(bootstrap, clicks_topic, produce.clicks(count=KAFKA_COUNT, users=40))
    kubectl("create", "configmap", "kafka-clicks-code", "--namespace", namespace,
            f"--from-file=job.py={KAFKA_CLICKS_DIR / 'job.py'}")  # fmt: skip
    kafka_name = "kafka-windows"
    kubectl("apply", "--namespace", namespace, "-f", "-", stdin=yaml.safe_dump(_kafka_job(
        name=kafka_name, bucket=bucket, s3=cluster_s3, kafka=cluster_kafka,
        clicks=clicks_topic, counts=counts_topic)))
    kafka_job = scenario.JobHandle(rest=rest, namespace=namespace, name=kafka_name)

    # The chaos starts once the job is whole: records flowing, its standby Ready, a
    # checkpoint completed (the Kafka job's too).
    scenario.wait_until(lambda: scenario.records_flowing(job.pod(f"{name}-attempt-1")),
                        what="the first records", timeout=300, detail=job.describe)
    scenario.wait_until(lambda: pod_is_ready(job.pod(f"{name}-standby-1")),
                        what="the standby to be Ready", timeout=300, detail=job.describe)
    scenario.wait_until(lambda: job.latest_checkpoint_id() >= 1, what="a checkpoint",
                        timeout=120, detail=job.describe)
    scenario.wait_until(lambda: kafka_job.latest_checkpoint_id() >= 1,
                        what="a checkpoint of the Kafka job", timeout=300,
                        detail=kafka_job.describe)

    watch, kafka_watch = JobWatch(job=job), JobWatch(job=kafka_job)
    for each in (watch, kafka_watch):
        each.poll()
        each.start()
    chaos = Chaos(seed=seed, job=job, ctr=real_cluster.node.ctr,
                  operator_namespace=operator.namespace, s3=cluster_s3, kafka_job=kafka_job,
                  kafka_namespace=cluster_kafka.namespace,
                  log=lambda line: print(line, flush=True))

    def over() -> bool:
        return job.status().get("phase") in ("Succeeded", "Failed")

    def kafka_over() -> bool:
        return kafka_job.status().get("phase") in ("Succeeded", "Failed")

    try:
        ran = chaos.run(seconds=CHAOS_SECONDS, done=over)
        ended_in_the_chaos = over()
        chaos_ended = time.time()
        # Not stuck: after the chaos the job checkpoints again and runs to its end.
        scenario.wait_until(lambda: over() or watch.first_completed_after(chaos_ended),
                            what="a checkpoint after the chaos", timeout=600,
                            detail=job.describe)
        done = scenario.wait_until(
            lambda: job.status() if over() else None, what="the job to finish",
            timeout=1800, detail=job.describe)
        kafka_done = scenario.wait_until(
            lambda: kafka_job.status() if kafka_over() else None,
            what="the Kafka job to finish", timeout=1800, detail=kafka_job.describe)
    finally:
        watch.stop()
        kafka_watch.stop()

    status = job.status()
    events = job_events(job)
    attempt, restarts = int(status["attempt"]), int(status.get("restarts", 0))
    restarted = _started_attempts(events)
    promotions = [e for e in events if e.reason == "Restarted" and "promoted standby" in e.message]
    attempt_ends = [e for e in events if e.type == "Warning" and e.reason not in NOT_ATTEMPT_ENDS
                    and e.reason != "RestartLimitExceeded"]
    driver_kills = [f for f in chaos.faults if f.kind == "driver"]
    found, unrecovered = recoveries(chaos.faults, watch, kafka_watch=kafka_watch)

    def ended_by_a_kill(event: Any) -> bool:
        return any(_names_driver(event.message, fault.pod) for fault in driver_kills)

    kafka_status = kafka_job.status()
    kafka_events = job_events(kafka_job)
    kafka_driver_kills = [f for f in chaos.faults if f.kind == "kafka-driver"]
    kafka_ends = [e for e in kafka_events if e.type == "Warning"
                  and e.reason not in NOT_ATTEMPT_ENDS and e.reason != "RestartLimitExceeded"]
    clicks = kafka_verify.read_values(bootstrap, clicks_topic)
    counts = kafka_verify.read_values(bootstrap, counts_topic)
    second = SecondJob(
        name=kafka_name, restarts=int(kafka_status.get("restarts", 0)),
        restarts_not_from_driver_kills=[
            f"{e.reason}: {e.message}" for e in kafka_ends
            if not any(_names_driver(e.message, f.pod) for f in kafka_driver_kills)],
        checkpoints=len(kafka_watch.checkpoints), records_in=len(clicks),
        records_out=len(counts))

    tally = Tally(
        seed=seed, chaos_seconds=ran, faults=chaos.faults, missed=chaos.missed,
        restarts=restarts, takeovers=sum(e.count for e in promotions),
        restarts_not_from_driver_kills=[f"{e.reason}: {e.message}" for e in attempt_ends
                                        if not ended_by_a_kill(e)],
        recoveries=found, unrecovered=unrecovered,
        standby_failures=sum(e.count for e in events if e.reason == "StandbyFailed"),
        checkpoints=len(watch.checkpoints), second=second,
    )
    print("\n".join(tally.lines()), flush=True)
    print("attempt ends: " + "; ".join(f"{e.reason} x{e.count}: {e.message}"
                                       for e in attempt_ends), flush=True)
    print(f"drivers in turn: {' -> '.join(watch.drivers)}; watch errors: "
          f"{dict(watch.errors)}", flush=True)

    # The job finished, and its output holds every input record exactly once.
    assert done["phase"] == "Succeeded", job.describe()
    records = scenario.read_jsonl_objects(cluster_s3.client(), bucket=bucket, prefix="output/")
    assert verify(records, count=COUNT) == []
    # The job ran through the whole chaos, not only part of it.
    assert not ended_in_the_chaos, f"the job ended {ran:.0f}s into the chaos"
    # Every restart is in the status and in the Events: one per attempt after the
    # first, each started by a Restarted Event and preceded by the Warning of the
    # attempt's end; every killed driver's attempt ended, and was restarted.
    assert restarts == attempt - 1, status
    assert restarted == list(range(2, attempt + 1)), [e for e in events if e.reason == "Restarted"]
    assert sum(e.count for e in attempt_ends) == restarts, attempt_ends
    unaccounted = [f.pod for f in driver_kills
                   if not any(_names_driver(e.message, f.pod) for e in attempt_ends)]
    assert unaccounted == [], f"driver kills with no attempt end in the Events: {unaccounted}"
    assert all(f.attempt is not None and f.attempt < attempt for f in driver_kills)
    # Every kill was followed by a completed checkpoint (the last one by the job's end).
    assert unrecovered == [], unrecovered
    # The Kafka job finished too, every window of its input counted exactly once in
    # what a read_committed reader sees; each of its killed drivers ended an attempt
    # that was restarted (broker kills may end attempts too: tallied, not asserted).
    assert kafka_done["phase"] == "Succeeded", kafka_job.describe()
    assert len(clicks) == KAFKA_COUNT
    assert kafka_verify.verify_windows(clicks, counts, size_ms=WINDOW_MS) == []
    assert int(kafka_status.get("restarts", 0)) == int(kafka_status["attempt"]) - 1
    unaccounted = [f.pod for f in kafka_driver_kills
                   if not any(_names_driver(e.message, f.pod) for e in kafka_ends)]
    assert unaccounted == [], f"Kafka driver kills with no attempt end: {unaccounted}"
