"""What importing the runtime costs: the package and the command line import the
engine only when asked, so that a driver can start Spark's JVM first.

Checked in fresh interpreters: this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from runtime_harness import REPO, runtime_env

ENGINE = ("pyarrow", "pandas", "pyspark", "job_runtime.sinks", "job_runtime.pipeline")


def _loaded_after(statement: str) -> set[str]:
    probe = (f"import json, sys\n{statement}\n"
             f"print(json.dumps([m for m in {ENGINE!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=runtime_env(None),
                          capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("statement", ["import job_runtime", "import job_runtime.cli"])
def test_importing_the_package_or_its_command_line_imports_no_engine(statement: str) -> None:
    assert _loaded_after(statement) == set()


def test_the_api_names_are_there_when_asked_for() -> None:
    loaded = _loaded_after("from job_runtime import Pipeline, ValueState, sinks, windows\n"
                           "import job_runtime\n"
                           "assert job_runtime.Pipeline is Pipeline\n"
                           "assert job_runtime.sources.sequence")
    assert {"job_runtime.sinks", "job_runtime.pipeline"} <= loaded


def test_a_name_the_api_lacks_is_an_attribute_error() -> None:
    import job_runtime

    with pytest.raises(AttributeError, match="no attribute 'Pipelin'"):
        job_runtime.Pipelin  # noqa: B018
