"""A broker that stays away, on real Spark and the real broker: the job does not sit
in Running while its output piles up. Past ``spec.health.sinkStallTimeout`` the
attempt ends as ``SinkStalled`` (exit 12, one line naming the sink and the interval),
which the operator restarts; once the broker is back, the next attempt restores the
latest checkpoint and every record arrives exactly once.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer
from runtime_harness import JobHarness

from cjob_spec.exit_codes import ExitCode
from e2e.kafka import KafkaBroker, create_topic
from e2e.kafka.clients import read_topic

COUNT = 1_500
RATE = 100  # 15 s of input: the broker goes away a few seconds in
STALL_BOUND = 10.0


def numbers(bootstrap: str, topic: str) -> list[int]:
    return sorted(json.loads(r.value or b"")["n"]
                  for r in read_topic(bootstrap=bootstrap, topic=topic))


def test_a_broker_away_longer_than_the_stall_bound_ends_the_attempt_and_nothing_is_lost(
        kafka_broker: KafkaBroker, harness: JobHarness) -> None:
    bootstrap = kafka_broker.bootstrap
    args = {"bootstrap": bootstrap, "count": COUNT, "rate": RATE,
            "output": create_topic(bootstrap=bootstrap, partitions=2),
            "control": create_topic(bootstrap=bootstrap, partitions=1,
                                    config={"cleanup.policy": "compact"})}
    stall = ["--sink-stall-timeout", str(STALL_BOUND)]
    first = harness.start(entrypoint="kafka_jobs:paced_numbers_to_kafka", args=args,
                          parallelism=2, extra=stall)
    harness.wait_status(1, lambda s: s["checkpoints"]["completed"] >= 2,
                        proc=first, what="two checkpoints, their output sent", timeout=180)
    away_at = time.monotonic()
    kafka_broker.stop(grace=0)
    try:
        ended = harness.finish(first, attempt=1, timeout=300)
        away = time.monotonic() - away_at
    finally:
        kafka_broker.start()

    assert ended.returncode == ExitCode.SINK_STALLED, ended.explain()
    errors = [line for line in ended.output.splitlines() if "ERROR job_runtime.driver" in line]
    assert len(errors) == 1, errors
    assert "the kafka sink stalled" in errors[0] and "stall bound" in errors[0], errors[0]
    print(f"broker away -> attempt ended as SinkStalled: {away:.1f}s "
          f"(stall bound {STALL_BOUND:g}s)")

    resumed = harness.run(entrypoint="kafka_jobs:paced_numbers_to_kafka", args=args,
                          attempt=2, parallelism=2, extra=stall)
    assert resumed.returncode == 0, resumed.explain()
    # Exactly once, read_committed; a probe's transaction committed after shows no
    # transaction of the job was left open to hold a reader back.
    probe = Producer({"bootstrap.servers": bootstrap,
                      "transactional.id": f"probe-{args['output']}"})
    probe.init_transactions(20)
    probe.begin_transaction()
    probe.produce(args["output"], value=json.dumps({"n": -1}).encode())
    probe.commit_transaction(20)
    assert numbers(bootstrap, args["output"]) == [-1, *range(COUNT)]
