"""The job's code on the driver: zipping pythonPath folders, fetching s3:// archives,
and which entries are shipped to the executors (no Spark here; see
``test_job_code_spark.py`` for executors importing shipped code)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from cjob_checkpoint.storage.errors import StorageUnavailableError
from e2e.s3 import S3Bucket, build_config, find_free_port
from job_runtime.errors import JobCodeError
from job_runtime.execution.driver import code as code_module
from job_runtime.execution.driver.code import (
    JobCodePaths,
    archive_name,
    executors_share_driver_files,
    package_directory,
    prepare_job_code,
    ship_job_code,
)


def configmap_mount(root: Path, files: dict[str, str]) -> Path:
    """A folder laid out as the kubelet mounts a ConfigMap: the data in a timestamped
    dot-directory, ``..data`` linking to it, and one visible symlink per top-level name."""
    root.mkdir(parents=True)
    data = root / "..2024_05_01_12_00_00.123456789"
    for name, text in files.items():
        target = data / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (root / "..data").symlink_to(data.name)
    for top in sorted({name.split("/", 1)[0] for name in files}):
        (root / top).symlink_to(f"..data/{top}")
    return root


def zip_names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# --- zipping a folder ----------------------------------------------------------------


def test_a_configmap_mount_is_zipped_with_resolved_files_and_no_dot_entries(
        tmp_path: Path) -> None:
    mount = configmap_mount(tmp_path / "mount", {
        "job.py": "def build(p): pass\n",
        "helpers.py": "X = 1\n",
        "notes.txt": "not code\n",
    })
    archive = tmp_path / "code.zip"

    assert package_directory(str(mount), archive=str(archive)) == 2

    assert zip_names(archive) == ["helpers.py", "job.py"]
    with zipfile.ZipFile(archive) as zipped:
        assert zipped.read("job.py") == b"def build(p): pass\n"


def test_only_modules_and_packages_are_zipped(tmp_path: Path) -> None:
    root = tmp_path / "code"
    for name, text in {
        "job.py": "", "pkg/__init__.py": "", "pkg/util.py": "", "ns/deep/mod.py": "",
        "pkg/__pycache__/util.cpython-311.pyc": "", ".hidden/secret.py": "", ".dotted.py": "",
        "not-a-package/mod.py": "", "my-script.py": "", "pkg/data.json": "{}",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    archive = tmp_path / "code.zip"

    package_directory(str(root), archive=str(archive))

    assert zip_names(archive) == [
        "ns/", "ns/deep/", "pkg/", "job.py", "ns/deep/mod.py", "pkg/__init__.py", "pkg/util.py"]


def test_the_same_code_gives_the_same_zip_bytes(tmp_path: Path) -> None:
    first = configmap_mount(tmp_path / "a", {"job.py": "A = 1\n", "pkg/__init__.py": ""})
    second = tmp_path / "b"
    (second / "pkg").mkdir(parents=True)
    (second / "pkg" / "__init__.py").write_text("")
    (second / "job.py").write_text("A = 1\n")
    os.utime(second / "job.py", (1_000_000_000, 1_000_000_000))

    package_directory(str(first), archive=str(tmp_path / "a.zip"))
    package_directory(str(second), archive=str(tmp_path / "b.zip"))

    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


def test_a_symlink_loop_ends(tmp_path: Path) -> None:
    root = tmp_path / "code"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "again").symlink_to("..")

    package_directory(str(root), archive=str(tmp_path / "code.zip"))

    assert "pkg/__init__.py" in zip_names(tmp_path / "code.zip")


def test_a_zipped_folder_imports_from_the_zip_alone(tmp_path: Path) -> None:
    mount = configmap_mount(tmp_path / "mount", {
        "job.py": "from pkg.util import double\n",
        "pkg/__init__.py": "",
        "pkg/util.py": "def double(x):\n    return 2 * x\n",
        "ns/mod.py": "NAME = 'namespace package'\n",
    })
    archive = tmp_path / "code.zip"
    package_directory(str(mount), archive=str(archive))

    script = ("import sys; sys.path.insert(0, sys.argv[1]); import job, ns.mod; "
              "print(job.double(21), ns.mod.NAME, job.__file__)")
    result = subprocess.run([sys.executable, "-c", script, str(archive)], cwd=tmp_path,
                            capture_output=True, text=True, check=True)

    assert result.stdout.split(" ", 1)[0] == "42"
    assert "namespace package" in result.stdout
    assert str(archive) in result.stdout


# --- what is shipped --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("master", "shares"),
    [("local[2]", True), ("local[*]", True), ("local[2,3]", True),
     ("local-cluster[1,2,1024]", False), ("k8s://https://10.0.0.1:443", False)],
)
def test_only_local_masters_share_the_drivers_files(master: str, shares: bool) -> None:
    assert executors_share_driver_files(master) is shares


def test_in_local_mode_folders_stay_on_the_subtasks_path_and_nothing_is_shipped(
        tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.py").write_text("")

    code = prepare_job_code([str(tmp_path / "jobs")], master="local[2]", s3=None,
                            work_dir=str(tmp_path / "work"))

    assert code.driver_path == (str(tmp_path / "jobs"),)
    assert code.executor_path == (str(tmp_path / "jobs"),)
    assert code.archives == ()


def test_with_executors_of_their_own_folders_are_shipped_and_left_off_their_path(
        tmp_path: Path) -> None:
    mount = configmap_mount(tmp_path / "mount", {"job.py": ""})
    baked = tmp_path / "baked-in-image"   # not on the driver: executors must have it
    work = tmp_path / "work"
    work.mkdir()

    code = prepare_job_code([str(mount), str(baked)], master="k8s://https://k:443", s3=None,
                            work_dir=str(work))

    assert code.driver_path == (str(mount), str(baked))
    assert code.archives == (str(work / "cjob-pythonpath-0-mount.zip"),)
    assert code.executor_path == (str(baked),)


def test_a_local_archive_is_shipped_as_is_and_a_file_that_is_not_one_is_refused(
        tmp_path: Path) -> None:
    (tmp_path / "code.zip").write_bytes(zip_bytes({"clicks.py": b"A = 1\n"}))
    (tmp_path / "clicks.py").write_text("A = 1\n")
    work = tmp_path / "work"
    work.mkdir()

    code = prepare_job_code([str(tmp_path / "code.zip")], master="k8s://https://k:443",
                            s3=None, work_dir=str(work))
    assert code.archives == (str(work / "cjob-pythonpath-0-code.zip"),)
    assert (work / "cjob-pythonpath-0-code.zip").read_bytes() == \
        (tmp_path / "code.zip").read_bytes()

    with pytest.raises(JobCodeError, match="is not a readable zip archive"):
        prepare_job_code([str(tmp_path / "clicks.py")], master="k8s://https://k:443",
                         s3=None, work_dir=str(work))


def test_relative_folders_are_resolved_against_the_drivers_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobs").mkdir()
    monkeypatch.chdir(tmp_path)

    code = prepare_job_code(["jobs"], master="local[1]", s3=None, work_dir=str(tmp_path))

    assert code.driver_path == (str(tmp_path / "jobs"),)


def test_archives_are_shipped_so_that_the_first_entry_comes_first() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.added: list[str] = []

        def addPyFile(self, path: str) -> None:
            self.added.append(path)

    from job_runtime.execution.driver.code import CodeEntry

    code = JobCodePaths(entries=(
        CodeEntry(source="a", local_path="/a", shipped="/w/a.zip"),
        CodeEntry(source="b", local_path="/b"),
        CodeEntry(source="c", local_path="/c", shipped="/w/c.zip"),
    ))
    recorder = Recorder()
    ship_job_code(recorder, code)
    # Spark puts the last added archive first on the workers' sys.path.
    assert recorder.added == ["/w/c.zip", "/w/a.zip"]


@pytest.mark.parametrize(
    ("index", "source", "name"),
    [(0, "/opt/cjob/jobs/my-job", "cjob-pythonpath-0-my-job.zip"),
     (1, "/opt/cjob/jobs/my-job/", "cjob-pythonpath-1-my-job.zip"),
     (2, "s3://code/v1/clicks.zip", "cjob-pythonpath-2-clicks.zip"),
     (3, "/", "cjob-pythonpath-3-root.zip"),
     (4, "/opt/odd name!", "cjob-pythonpath-4-odd_name.zip")],
)
def test_shipped_archives_have_unique_safe_names(index: int, source: str, name: str) -> None:
    assert archive_name(index, source) == name


# --- s3:// archives ---------------------------------------------------------------------


class TestS3Archives:
    def put(self, bucket: S3Bucket, key: str, data: bytes) -> str:
        bucket.client.put_object(Bucket=bucket.bucket, Key=key, Body=data)
        return f"{bucket.uri}/{key}"

    def prepare(self, uri: str, bucket: S3Bucket, work: Path, **kwargs: Any) -> JobCodePaths:
        work.mkdir(exist_ok=True)
        return prepare_job_code([uri], master=kwargs.get("master", "local[2]"),
                                s3=kwargs.get("s3", bucket.s3_config), work_dir=str(work))

    def test_an_archive_is_downloaded_put_on_the_drivers_path_and_shipped(
            self, s3_bucket: S3Bucket, tmp_path: Path) -> None:
        uri = self.put(s3_bucket, "code/v1/clicks.zip",
                       zip_bytes({"clicks.py": b"def build(p): pass\n"}))

        code = self.prepare(uri, s3_bucket, tmp_path / "work")

        local = str(tmp_path / "work" / "cjob-pythonpath-0-clicks.zip")
        assert code.driver_path == (local,)
        assert code.archives == (local,)
        assert code.executor_path == ()
        assert zip_names(Path(local)) == ["clicks.py"]

    def test_a_missing_object_is_a_one_line_error(self, s3_bucket: S3Bucket,
                                                  tmp_path: Path) -> None:
        uri = f"{s3_bucket.uri}/code/missing.zip"
        with pytest.raises(JobCodeError) as caught:
            self.prepare(uri, s3_bucket, tmp_path / "work")
        assert str(caught.value) == f"job code {uri}: no such object"

    def test_a_missing_bucket_is_named(self, s3_bucket: S3Bucket, tmp_path: Path) -> None:
        uri = "s3://no-such-bucket-for-code/code.zip"
        with pytest.raises(JobCodeError, match="bucket 'no-such-bucket-for-code' does not exist"):
            self.prepare(uri, s3_bucket, tmp_path / "work")

    def test_an_object_that_is_not_a_zip_is_a_one_line_error(self, s3_bucket: S3Bucket,
                                                              tmp_path: Path) -> None:
        uri = self.put(s3_bucket, "code/clicks.zip", b"def build(p): pass\n")
        with pytest.raises(JobCodeError) as caught:
            self.prepare(uri, s3_bucket, tmp_path / "work")
        assert str(caught.value) == f"job code {uri}: is not a readable zip archive"

    def test_a_damaged_zip_is_a_one_line_error(self, s3_bucket: S3Bucket,
                                               tmp_path: Path) -> None:
        data = bytearray(zip_bytes({"clicks.py": b"A = 1\n" * 50}))
        start = data.index(b"A = 1")   # stored, not deflated: flip a byte of the content
        data[start] ^= 0xFF
        uri = self.put(s3_bucket, "code/clicks.zip", bytes(data))
        with pytest.raises(JobCodeError, match=r"is damaged: clicks\.py fails its CRC check"):
            self.prepare(uri, s3_bucket, tmp_path / "work")

    def test_an_archive_larger_than_the_limit_is_refused_before_it_is_downloaded(
            self, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A pythonPath may name any object a user can write: a huge one must not fill
        the driver's memory or disk."""
        monkeypatch.setattr(code_module, "MAX_ARCHIVE_BYTES", 4096)
        big = zip_bytes({"clicks.py": os.urandom(6000)})
        uri = self.put(s3_bucket, "code/big.zip", big)
        with pytest.raises(JobCodeError) as caught:
            self.prepare(uri, s3_bucket, tmp_path / "work")
        assert str(caught.value) == (f"job code {uri}: is {len(big)} bytes, more than the "
                                     f"4096 a code archive may have")
        assert not list((tmp_path / "work").iterdir())

    def test_an_archive_within_the_limit_is_downloaded_whole(
            self, s3_bucket: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        data = zip_bytes({"clicks.py": os.urandom(3000)})
        monkeypatch.setattr(code_module, "MAX_ARCHIVE_BYTES", len(data))
        uri = self.put(s3_bucket, "code/fits.zip", data)
        self.prepare(uri, s3_bucket, tmp_path / "work")
        assert (tmp_path / "work" / "cjob-pythonpath-0-fits.zip").read_bytes() == data

    def test_an_unreachable_endpoint_is_a_storage_outage_not_a_code_error(
            self, s3_bucket: S3Bucket, tmp_path: Path) -> None:
        config = build_config(f"http://127.0.0.1:{find_free_port()}", connect_timeout=1.0,
                              max_attempts=1)
        with pytest.raises(StorageUnavailableError):
            self.prepare(f"{s3_bucket.uri}/code.zip", s3_bucket, tmp_path / "work", s3=config)

    def test_an_archive_with_a_folder_on_top_is_accepted_with_a_warning(
            self, s3_bucket: S3Bucket, tmp_path: Path,
            caplog: pytest.LogCaptureFixture) -> None:
        uri = self.put(s3_bucket, "code/clicks.zip", zip_bytes({"clicks/job.py": b""}))
        self.prepare(uri, s3_bucket, tmp_path / "work")
        assert "zip a folder's contents, not the folder" in caplog.text
