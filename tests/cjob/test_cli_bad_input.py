"""``cjob`` answers bad input with one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cli_runs import assert_one_line_error, run_cjob, write_job

GOOD = """\
    apiVersion: checkpointed.io/v1alpha1
    kind: CheckpointedJob
    metadata:
      name: demo
    spec:
      image: runtime:1
      job:
        entrypoint: {entrypoint}
      parallelism: 1
      spark: {{master: "local[1]"}}
      checkpoint:
        storage: file:///var/lib/cjob/checkpoints
        interval: 1s
      restartPolicy: {{type: OnFailure, maxRestarts: 2, backoff: {{initial: 1s}}}}
      {extra}
"""


def good_job(tmp_path: Path, *, entrypoint: str = "job:build", extra: str = "") -> Path:
    return write_job(tmp_path / "job.yaml", GOOD.format(entrypoint=entrypoint, extra=extra))


class TestInvalidDocuments:
    def test_an_unknown_field_is_named_with_a_suggestion(self, tmp_path: Path) -> None:
        path = good_job(tmp_path, extra="paralelism: 3")
        result = run_cjob("validate", str(path), cwd=tmp_path)
        assert_one_line_error(result, "spec.paralelism", "parallelism")

    def test_a_wrong_type_is_named_with_its_path(self, tmp_path: Path) -> None:
        path = write_job(tmp_path / "job.yaml",
                         GOOD.format(entrypoint="job:build", extra="").replace(
                             "parallelism: 1", "parallelism: two"))
        result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
        assert_one_line_error(result, "spec.parallelism")

    def test_a_snapshot_object_to_restore_is_refused_locally_with_the_way_to_do_it(
            self, tmp_path: Path) -> None:
        path = good_job(tmp_path, extra="restore: {snapshot: before-upgrade}")
        result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
        assert_one_line_error(result, "spec.restore.snapshot", "spec.restore.from")

    def test_periodic_snapshots_are_refused_locally_with_the_way_to_take_one(
            self, tmp_path: Path) -> None:
        path = good_job(tmp_path, extra="snapshots: {interval: 1h}")
        result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
        assert_one_line_error(result, "spec.snapshots", "cjob snapshot")

    def test_a_snapshot_and_a_checkpoint_to_restore_are_refused_together(
            self, tmp_path: Path) -> None:
        path = good_job(tmp_path, extra="restore: {snapshot: before-upgrade, from: 3}")
        result = run_cjob("validate", str(path), cwd=tmp_path)
        assert_one_line_error(result, "spec.restore.snapshot", "keep one")

    def test_a_missing_file_is_reported(self, tmp_path: Path) -> None:
        result = run_cjob("run", str(tmp_path / "nope.yaml"), cwd=tmp_path)
        assert_one_line_error(result, "nope.yaml")

    def test_invalid_yaml_is_reported_with_its_line(self, tmp_path: Path) -> None:
        path = tmp_path / "job.yaml"
        path.write_text("apiVersion: checkpointed.io/v1alpha1\nkind: [unclosed\n")
        result = run_cjob("validate", str(path), cwd=tmp_path)
        assert_one_line_error(result, "job.yaml:3:", "invalid YAML")

    def test_a_valid_document_validates(self, tmp_path: Path) -> None:
        result = run_cjob("validate", str(good_job(tmp_path)), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "valid" in result.stdout


class TestStateDirectory:
    @pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
    def test_an_unwritable_state_dir_is_refused_before_anything_runs(self, tmp_path: Path
                                                                     ) -> None:
        state = tmp_path / "ro"
        state.mkdir()
        state.chmod(stat.S_IRUSR | stat.S_IXUSR)
        result = run_cjob("run", str(good_job(tmp_path)), "--state-dir", str(state),
                          cwd=tmp_path)
        assert_one_line_error(result, "state dir")

    def test_a_state_dir_that_is_a_file_is_refused_before_anything_runs(self, tmp_path: Path
                                                                        ) -> None:
        state = tmp_path / "file"
        state.write_text("not a directory")
        result = run_cjob("run", str(good_job(tmp_path)), "--state-dir", str(state),
                          cwd=tmp_path)
        assert_one_line_error(result, "state dir")

    def test_status_of_an_unknown_job_says_so(self, tmp_path: Path) -> None:
        result = run_cjob("status", "ghost", "--state-dir", str(tmp_path), cwd=tmp_path)
        assert_one_line_error(result, "ghost")


class TestFailingAttempts:
    """These start a real driver process, which fails before Spark starts."""

    def test_a_missing_entrypoint_module_fails_at_once_without_restarts(self, tmp_path: Path
                                                                        ) -> None:
        path = good_job(tmp_path, entrypoint="nosuchmodule:build")
        result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
        assert result.returncode == 1
        assert "module 'nosuchmodule' not found" in result.stdout
        status = json.loads((tmp_path / "s" / "demo" / "status.json").read_text())
        assert status["phase"] == "Failed"
        assert status["restarts"] == 0
        assert status["lastFailure"]["exitCode"] == 2

    def test_progress_left_by_an_earlier_run_is_never_reported_as_this_runs(
            self, tmp_path: Path) -> None:
        stale = tmp_path / "s" / "demo" / "attempt-1.progress.json"
        stale.parent.mkdir(parents=True)
        stale.write_text(json.dumps({
            "epoch": 0, "recordsIn": 12345, "checkpoints": {"completed": 5},
            "latestCheckpoint": {"id": 7, "path": "file:///old/chk-7/_metadata",
                                 "completedAt": 1.0e9, "sizeBytes": 10}}))
        path = good_job(tmp_path, entrypoint="nosuchmodule:build")
        result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), "--fresh",
                          cwd=tmp_path)
        assert result.returncode == 1
        assert "12,345" not in result.stdout
        status = json.loads((tmp_path / "s" / "demo" / "status.json").read_text())
        assert status.get("latestCheckpoint") is None

    def test_a_checkpoint_path_of_another_job_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "job.py").write_text(
            "from job_runtime import sources, sinks\n"
            "def build(p):\n"
            "    p.source(sources.sequence(count=10)).sink(sinks.print())\n")
        foreign = "file:///var/lib/cjob/checkpoints/other-job-1234/chk-7/_metadata"
        path = good_job(tmp_path, extra=f"restore: {{from: '{foreign}'}}")
        text = path.read_text().replace("entrypoint: job:build",
                                        "entrypoint: job:build\n    pythonPath: [.]")
        path.write_text(text)
        result = run_cjob("run", str(path), "--state-dir", str(tmp_path / "s"), cwd=tmp_path)
        assert result.returncode == 1
        assert "not a checkpoint of job demo-" in result.stdout
        status = json.loads((tmp_path / "s" / "demo" / "status.json").read_text())
        assert status["lastFailure"]["exitCode"] == 6
        assert status["restarts"] == 0
