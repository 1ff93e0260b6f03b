"""``all.json``: which commit a run of ``python -m bench all`` measured, and its steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench.run_record import RunRecord, code_digest, current_commit


def test_each_step_is_on_disk_as_soon_as_it_ends(tmp_path: Path) -> None:
    record = RunRecord.begin(argv=["all"], results=tmp_path, commit="abc", code="c1")
    record.add_step(number=1, args=["throughput"], seconds=12.34, error=None)
    body = json.loads((tmp_path / "all.json").read_text())
    (step,) = body["parts"][0]["steps"]
    assert (step["number"], step["args"], step["seconds"], step["ok"]) == (
        1, ["throughput"], 12.3, True)
    assert len(step["load_average"]) == 3
    assert body["parts"][0]["finished_at"] is None
    record.add_step(number=2, args=["kafka"], seconds=1.0, error="no broker")
    record.finish()
    body = json.loads((tmp_path / "all.json").read_text())
    assert body["parts"][0]["steps"][1]["error"] == "no broker"
    assert body["parts"][0]["finished_at"] is not None


def test_a_part_on_the_same_code_is_added_to_the_record_even_after_a_prose_commit(
        tmp_path: Path) -> None:
    first = RunRecord.begin(argv=["all", "--to", "13"], results=tmp_path, commit="abc",
                            code="c1")
    first.add_step(number=13, args=["operator"], seconds=1.0, error=None)
    first.finish()
    second = RunRecord.begin(argv=["all", "--from", "14"], results=tmp_path, commit="abd",
                             code="c1")
    second.add_step(number=14, args=["realistic"], seconds=1.0, error=None)
    body = json.loads((tmp_path / "all.json").read_text())
    assert [part["argv"] for part in body["parts"]] == [["all", "--to", "13"],
                                                       ["all", "--from", "14"]]
    assert body["commit"] == "abc"
    assert [part["commit"] for part in body["parts"]] == ["abc", "abd"]


def test_a_part_on_another_commit_starts_a_new_record_instead_of_mixing_versions(
        tmp_path: Path) -> None:
    RunRecord.begin(argv=["all"], results=tmp_path, commit="abc", code="c1").finish()
    RunRecord.begin(argv=["all", "--from", "14"], results=tmp_path, commit="def")
    body = json.loads((tmp_path / "all.json").read_text())
    assert body["commit"] == "def"
    assert len(body["parts"]) == 1


def test_uncommitted_code_is_marked_and_never_joins_an_earlier_part(tmp_path: Path) -> None:
    RunRecord.begin(argv=["all"], results=tmp_path, commit="abc+dirty", code="c1").finish()
    RunRecord.begin(argv=["all"], results=tmp_path, commit="abc+dirty", code="c1")
    body = json.loads((tmp_path / "all.json").read_text())
    assert len(body["parts"]) == 1


def test_a_record_of_another_layout_or_a_broken_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "all.json").write_text("{not json")
    RunRecord.begin(argv=["all"], results=tmp_path, commit="abc", code="c1")
    assert json.loads((tmp_path / "all.json").read_text())["version"] == 1
    (tmp_path / "all.json").write_text(json.dumps({"version": 99, "commit": "abc"}))
    RunRecord.begin(argv=["all"], results=tmp_path, commit="abc", code="c1")
    assert json.loads((tmp_path / "all.json").read_text())["version"] == 1


def test_the_commit_is_dirty_when_tracked_files_differ(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", *args],
                       cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-qm", "one")
    clean = current_commit(repo=tmp_path)
    assert len(clean) == 40
    (tmp_path / "a.py").write_text("x = 2\n")
    assert current_commit(repo=tmp_path) == clean + "+dirty"


def test_prose_and_results_change_neither_the_code_digest_nor_cleanliness(
        tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", *args],
                       cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("old\n")
    (tmp_path / "bench" / "results" / "r.json").write_text("{}\n")
    git("add", ".")
    git("commit", "-qm", "one")
    before = code_digest(repo=tmp_path)
    (tmp_path / "README.md").write_text("numbers\n")
    (tmp_path / "bench" / "results" / "r.json").write_text("{\"x\": 1}\n")
    assert not current_commit(repo=tmp_path).endswith("+dirty")
    git("commit", "-qam", "numbers")
    assert code_digest(repo=tmp_path) == before
    (tmp_path / "a.py").write_text("x = 2\n")
    git("commit", "-qam", "code")
    assert code_digest(repo=tmp_path) != before


def test_results_written_by_an_earlier_part_leave_the_next_part_clean(tmp_path: Path) -> None:
    """A second part runs where the first left its results uncommitted: the first line
    of git's status (a results file) must be read whole, or the part looks dirty and
    starts a record of its own."""
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", *args],
                       cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "all.json").write_text("{}\n")
    (tmp_path / "bench" / "run.py").write_text("x = 1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    (tmp_path / "bench" / "results" / "all.json").write_text("{\"parts\": []}\n")
    assert not current_commit(repo=tmp_path).endswith("+dirty")
    (tmp_path / "bench" / "run.py").write_text("x = 2\n")
    assert current_commit(repo=tmp_path).endswith("+dirty")


def test_a_part_joins_a_record_on_other_code_only_when_asked_and_lists_what_changed(
        tmp_path: Path) -> None:
    RunRecord.begin(argv=["all", "--from", "14"], results=tmp_path, commit="abc",
                    code="c1").finish()
    asked: list[str] = []

    def changed(since: str) -> list[str]:
        asked.append(since)
        return ["cjob/kubectl.py"]
    RunRecord.begin(argv=["all", "--to", "13", "--join"], results=tmp_path, commit="def",
                    code="c2", join=True, changed=changed)
    body = json.loads((tmp_path / "all.json").read_text())
    assert asked == ["abc"]
    assert [part["changed"] for part in body["parts"]] == [[], ["cjob/kubectl.py"]]
    assert body["code"] == "c1"


def test_uncommitted_code_never_joins_even_when_asked(tmp_path: Path) -> None:
    RunRecord.begin(argv=["all"], results=tmp_path, commit="abc", code="c1").finish()
    RunRecord.begin(argv=["all"], results=tmp_path, commit="def+dirty", code="c2", join=True,
                    changed=lambda since: [])
    body = json.loads((tmp_path / "all.json").read_text())
    assert body["commit"] == "def+dirty"
    assert len(body["parts"]) == 1


def test_changed_files_leave_out_tests_docs_prose_and_results(tmp_path: Path) -> None:
    from bench.run_record import changed_files

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", *args],
                              cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.strip()
    git("init", "-q")
    for name in ("a.py", "tests/t.py", "docs/x.txt", "README.md", "bench/results/r.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    git("add", ".")
    git("commit", "-qm", "one")
    first = git("rev-parse", "HEAD")
    for name in ("a.py", "tests/t.py", "docs/x.txt", "README.md", "bench/results/r.json"):
        (tmp_path / name).write_text("2\n")
    git("commit", "-qam", "two")
    assert changed_files(since=first, repo=tmp_path) == ["a.py"]
