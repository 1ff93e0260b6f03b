"""Executors import the job's code because the driver shipped it (real Spark).

The job's modules live in a folder that only the driver is told about, as with a
ConfigMap mounted into the driver pod: the Python workers of the executors find them
only in what the driver ships. ``local-cluster`` gives the job executor processes of
their own (as pods on Kubernetes), started by Spark with their own environment; the
folder is on no ``PYTHONPATH``. Records carry the file their module was imported from
on the executor, so the tests see where the code came from, and one run with shipping
switched off shows that nothing else makes the folder importable there.

``cjob run`` of a job without ``image`` whose code is an ``s3://`` zip checks the
other source of code, against moto's S3 server.
"""

from __future__ import annotations

import io
import sys
import zipfile
from pathlib import Path
from typing import Any

from runtime_harness import EmbeddedRun, JobHarness, read_output, run_embedded, write_job_yaml

from cjob_spec.exit_codes import ExitCode
from e2e.s3 import S3Bucket

COUNT = 3000
KEYS = 7
LOCAL_CLUSTER = "local-cluster[1,2,1024]"
"""One worker with two cores (the two subtasks of the barrier stage) and 1 GiB."""

JOB_MODULE = '''\
"""A running sum whose record functions come from a sibling module of the job."""

from job_runtime import Pipeline, sinks, sources
from shipped_helpers import add, keyed


def build(p: Pipeline) -> None:
    (p.source(sources.sequence(count=int(p.args["count"])))
      .map(lambda r: keyed(r))
      .key_by("key")
      .reduce(lambda a, b: add(a, b))
      .sink(sinks.files(p.args["output"], format="jsonl")))
'''

HELPERS_MODULE = f'''\
"""Record functions that say where they were imported from."""

KEYS = {KEYS}


def keyed(record):
    return {{"key": record["seq"] % KEYS, "value": record["seq"], "module": __file__}}


def add(a, b):
    return {{"key": a["key"], "value": a["value"] + b["value"], "module": __file__}}
'''

WITHOUT_SHIPPING = (
    "import sys\n"
    "import job_runtime.execution.driver.run as driver\n"
    "driver.ship_job_code = lambda spark_context, code: None\n"
    "from job_runtime.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
"""A driver whose shipping is switched off (for the run that must fail)."""


def write_code(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "shipped_job.py").write_text(JOB_MODULE)
    (folder / "shipped_helpers.py").write_text(HELPERS_MODULE)
    return folder


def code_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("shipped_job.py", JOB_MODULE)
        archive.writestr("shipped_helpers.py", HELPERS_MODULE)
    return buffer.getvalue()


def private_spark_home(base: Path) -> Path:
    """A SPARK_HOME linking to pyspark's own, so that ``local-cluster`` keeps its work
    directory (executor logs, fetched files) here and not inside the installed package."""
    import pyspark

    installed = Path(pyspark.__file__).resolve().parent
    home = base / "spark-home"
    home.mkdir()
    for name in ("bin", "jars", "python", "sbin", "conf"):
        if (installed / name).exists():
            (home / name).symlink_to(installed / name)
    return home


def expected_sums() -> dict[int, int]:
    return {key: sum(range(key, COUNT, KEYS)) for key in range(KEYS)}


def final_sums(records: list[dict[str, Any]]) -> dict[int, int]:
    sums: dict[int, int] = {}
    for record in records:
        sums[record["key"]] = max(sums.get(record["key"], -1), record["value"])
    return sums


def run_driver(harness: JobHarness, code: Path, *, launcher: list[str] | None = None,
               extra: list[str] | None = None) -> Any:
    return harness.run(
        entrypoint="shipped_job:build",
        args={"count": COUNT, "output": str(harness.output)},
        master=LOCAL_CLUSTER, python_path=[str(code)], launcher=launcher, extra=extra,
        env={"SPARK_HOME": str(private_spark_home(harness.base))})


def test_executors_of_their_own_import_the_jobs_folder_from_the_zip_the_driver_shipped(
        harness: JobHarness) -> None:
    code = write_code(harness.base / "mounted-code")

    run = run_driver(harness, code)

    assert run.returncode == 0, run.explain()
    assert "shipping 2 modules of" in run.output
    records = harness.output_records()
    assert final_sums(records) == expected_sums()
    modules = {record["module"] for record in records}
    assert modules and all("/cjob-pythonpath-0-mounted-code.zip/" in m for m in modules), modules
    assert not any(m.startswith(str(code)) for m in modules)


def test_without_shipping_the_executors_cannot_import_the_jobs_folder(
        harness: JobHarness) -> None:
    code = write_code(harness.base / "mounted-code")

    run = run_driver(harness, code, launcher=[sys.executable, "-c", WITHOUT_SHIPPING],
                     extra=["--task-attempts", "1"])

    # A permanent configuration error, named as such, not Spark's summary.
    assert run.returncode == ExitCode.BAD_CONFIG, run.explain()
    assert ("entrypoint 'shipped_job:build': module 'shipped_job' not found "
            "(check job.pythonPath) on an executor") in run.output, run.explain()
    assert not harness.output.exists() or harness.output_records() == []


def test_cjob_run_of_a_job_without_an_image_fetches_and_ships_its_s3_code(
        s3_bucket: S3Bucket, tmp_path: Path) -> None:
    s3_bucket.client.put_object(Bucket=s3_bucket.bucket, Key="code/v1/running-sum.zip",
                                Body=code_zip())
    output = tmp_path / "output"
    job_file = write_job_yaml(
        tmp_path / "job.yaml", name="s3-code", entrypoint="shipped_job:build",
        python_path=[f"{s3_bucket.uri}/code/v1/running-sum.zip"],
        args={"count": COUNT, "output": str(output)}, image=None)
    assert "image" not in job_file.read_text()

    run: EmbeddedRun = run_embedded(job_file, state_dir=tmp_path / "state", name="s3-code",
                                    env=s3_bucket.env)

    assert run.returncode == 0, run.explain()
    assert run.status["phase"] == "Succeeded"
    assert "fetched s3://" in run.attempt_log(1)
    records = read_output(output)
    assert final_sums(records) == expected_sums()
    modules = {record["module"] for record in records}
    assert all("/cjob-pythonpath-0-running-sum.zip/" in m for m in modules), modules
