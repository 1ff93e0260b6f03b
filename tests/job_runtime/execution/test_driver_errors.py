"""A driver that cannot do its job says why in one place and exits with the right code.

The exit code is all a supervisor sees after the process is gone, so it carries
the class of failure (``cjob_spec.exit_codes``). Mistakes found before Spark
starts cost no Spark start-up; user code failing inside Spark must end the driver
in bounded time, not hang it.
"""

from __future__ import annotations

import pytest
from runtime_harness import JobHarness, error_lines

from cjob_spec.exit_codes import ExitCode


def test_a_missing_entrypoint_module_exits_2_with_one_line(harness: JobHarness) -> None:
    run = harness.run(entrypoint="no_such_job_module:build", args={}, timeout=120)
    assert run.returncode == ExitCode.BAD_CONFIG, run.explain()
    assert "Traceback" not in run.output
    [line] = error_lines(run.output)
    assert "entrypoint 'no_such_job_module:build': module 'no_such_job_module' not found" in line


def test_a_missing_build_function_exits_2(harness: JobHarness) -> None:
    run = harness.run(entrypoint="crashing_jobs:no_such_function", args={}, timeout=120)
    assert run.returncode == ExitCode.BAD_CONFIG, run.explain()
    assert "has no function 'no_such_function'" in run.output
    assert "Traceback" not in run.output


@pytest.mark.parametrize(("extra", "message"), [
    (["--parallelism", "3"], "local[2] offers 2 task slots but parallelism is 3"),
    (["--parallelism", "0"], "--parallelism: must be within 1..128"),
    (["--checkpoint-mode", "sometimes"], "invalid choice: 'sometimes'"),
    (["--beacon-host", "127.0.0.1"], "--beacon-host needs a configmap:NAMESPACE/NAME store"),
])
def test_invalid_settings_exit_2_before_spark_starts(harness: JobHarness, extra: list[str],
                                                    message: str) -> None:
    run = harness.run(entrypoint="crashing_jobs:running_sum",
                      args={"count": 10, "output": str(harness.output)},
                      extra=extra, timeout=120)
    assert run.returncode == ExitCode.BAD_CONFIG, run.explain()
    assert message in run.output
    assert "Traceback" not in run.output


def test_a_configmap_store_without_kubernetes_credentials_exits_2_with_one_line(
        harness: JobHarness) -> None:
    # Outside a pod and without a kubeconfig the store cannot reach any API server:
    # a setup mistake, which no restart fixes.
    run = harness.run(entrypoint="crashing_jobs:running_sum",
                      args={"count": 10, "output": str(harness.output)},
                      extra=["--store", "configmap:team/sums-checkpoints"],
                      env={"KUBECONFIG": str(harness.base / "no-such-kubeconfig"),
                           "KUBERNETES_SERVICE_HOST": ""},
                      timeout=180)
    assert run.returncode == ExitCode.BAD_CONFIG, run.explain()
    assert "Traceback" not in run.output
    [line] = error_lines(run.output)
    assert "configmap:team/sums-checkpoints" in line and "kubeconfig" in line
