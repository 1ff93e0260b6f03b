"""A subtask killed while its sink stages an interval, on real Spark in local mode.

The barrier has passed and been forwarded, but the interval's staging file is
not durable yet: the checkpoint must not complete, and the relaunched stage
restores an earlier one whose records follow again, so the output stays exactly
once (the running-sum job's verifier finds a lost or a duplicated record).
"""

from __future__ import annotations

from runtime_harness import JobHarness

COUNT = 6000
RATE = 1000  # records per second overall: the job runs for about 6 s


def test_a_kill_before_the_staged_interval_is_durable_keeps_the_output_exactly_once(
        harness: JobHarness) -> None:
    run = harness.run(entrypoint="crashing_jobs:running_sum",
                      args={"count": COUNT, "rate": RATE, "output": str(harness.output)},
                      env={"CJOB_FAULTS": "subtask.during-pre-commit@3"})

    assert run.returncode == 0, run.explain()
    assert list(harness.faults_dir.glob(".cjob-fault-*")), "the fault point never fired"
    assert run.status is not None
    assert run.status["state"] == "finished"
    assert run.status["subtaskRestarts"] >= 1, "Spark did not relaunch the barrier stage"
    restored = run.status["restoredFrom"]
    assert restored is not None and restored["id"] < 3, restored
    assert harness.running_sum_problems(count=COUNT) == []
