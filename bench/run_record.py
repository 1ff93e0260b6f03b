"""What one ``python -m bench all`` measured on, and how long each of its steps took.

Every benchmark's result file says what it measured; this record says which commit
measured it, when, for how long and under what load, so a README's run of record can
be checked against it. It is written after every step, so a run that is stopped keeps
what it finished. A run may come in parts (``--from``/``--to``, when the whole does not
fit the time at hand): a part on the same code as the record on disk is added to it, one
on other code starts a new record, so a record never mixes two versions unawares. "The
same code" is every tracked file but the prose (``*.md``, ``docs/``), the tests and the
results themselves, so a commit that only writes down the first part's numbers does not
split the run. A part may join a record measured on other code when asked to
(``--join``: work went on between the parts); it then lists every measured file that
changed since the record's first part, for a reader to judge.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import REPO, RESULTS

VERSION = 1
"""The layout of ``all.json``; a record of another version is replaced, not merged."""
NAME = "all.json"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git(*args: str, repo: Path, strip: bool = True) -> str:
    """Git's output, stripped unless ``strip`` is false (a status's first line begins
    with a space that is part of it)."""
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        return ""
    return done.stdout.strip() if strip else done.stdout


NOT_MEASURED = ("bench/results/", "docs/", "tests/")
"""Folders whose files no benchmark runs (with every ``*.md`` file)."""


def _measured(path: str) -> bool:
    """Whether a tracked file can change what a benchmark measures."""
    return not (path.endswith(".md") or path.startswith(NOT_MEASURED))


def changed_files(*, since: str, repo: Path = REPO) -> list[str]:
    """The measured files that differ between commit ``since`` and ``HEAD``."""
    names = _git("diff", "--name-only", since.removesuffix("+dirty"), "HEAD", repo=repo)
    return sorted(name for name in names.splitlines() if name and _measured(name))


def current_commit(*, repo: Path = REPO) -> str:
    """The checked-out commit, ``+dirty`` when measured files differ from it (a run on
    uncommitted code is no run of record, and the record must say so)."""
    commit = _git("rev-parse", "HEAD", repo=repo) or "unknown"
    changed = _git("status", "--porcelain", "--untracked-files=no", repo=repo,
                   strip=False).splitlines()
    dirty = any(_measured(line[3:].split(" -> ")[-1]) for line in changed if line)
    return commit + ("+dirty" if dirty else "")


def code_digest(*, repo: Path = REPO) -> str:
    """A digest of every measured tracked file's content at ``HEAD``: equal for two
    commits that differ only in prose or results."""
    listing = _git("ls-tree", "-r", "HEAD", repo=repo).splitlines()
    digest = hashlib.sha256()
    for line in listing:
        meta, _, path = line.partition("\t")
        if _measured(path):
            digest.update(f"{meta} {path}\n".encode())
    return digest.hexdigest()[:16]


@dataclasses.dataclass(kw_only=True)
class Step:
    number: int
    args: list[str]
    started_at: str
    seconds: float
    ok: bool
    error: str | None
    load_average: tuple[float, float, float]
    """The 1, 5 and 15 minute load averages as the step ended: a busy machine shows."""


@dataclasses.dataclass(kw_only=True)
class Part:
    argv: list[str]
    started_at: str
    commit: str
    finished_at: str | None = None
    steps: list[Step] = dataclasses.field(default_factory=list)
    changed: list[str] = dataclasses.field(default_factory=list)
    """Measured files changed since the record's first part (a part that joined with
    ``--join``); empty for a part on the same code."""


@dataclasses.dataclass(kw_only=True)
class RunRecord:
    commit: str
    """The commit the record began on (later parts may be on commits that add prose)."""
    code: str
    """:func:`code_digest` of that commit: the parts of one record share it."""
    cores: int
    parts: list[Part]
    path: Path
    version: int = VERSION

    @classmethod
    def begin(cls, *, argv: list[str], results: Path = RESULTS, commit: str | None = None,
              code: str | None = None, join: bool = False,
              changed: Callable[[str], list[str]] | None = None) -> RunRecord:
        """A new part: added to the record on disk when that record measured the same
        code (or, with ``join``, other code: the part then lists the measured files
        changed since, by ``changed(first commit)``), else the first part of a new
        record. Uncommitted code never joins or is joined."""
        commit = commit or current_commit()
        code = code or code_digest()
        path = results / NAME
        part = Part(argv=list(argv), started_at=_now(), commit=commit)
        earlier = _load(path)
        clean = not commit.endswith("+dirty") and (
            earlier is None or not earlier.commit.endswith("+dirty"))
        if earlier is not None and clean and (earlier.code == code or join):
            if earlier.code != code:
                part.changed = (changed or (lambda since: changed_files(since=since)))(
                    earlier.commit)
            earlier.parts.append(part)
            earlier.path = path
            earlier.save()
            return earlier
        record = cls(commit=commit, code=code, cores=os.cpu_count() or 0, parts=[part],
                     path=path)
        record.save()
        return record

    def add_step(self, *, number: int, args: list[str], seconds: float,
                 error: str | None) -> None:
        started = (datetime.datetime.now(datetime.UTC)
                   - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        load = os.getloadavg()
        self.parts[-1].steps.append(Step(
            number=number, args=list(args), started_at=started, seconds=round(seconds, 1),
            ok=error is None, error=error,
            load_average=(round(load[0], 2), round(load[1], 2), round(load[2], 2))))
        self.save()

    def finish(self) -> None:
        self.parts[-1].finished_at = _now()
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"version": self.version, "commit": self.commit, "code": self.code,
                "cores": self.cores,
                "parts": [dataclasses.asdict(part) for part in self.parts]}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(body, indent=2) + "\n")
        temporary.replace(self.path)


def _load(path: Path) -> RunRecord | None:
    """The record on disk, or None when there is none or it is not one this code reads."""
    try:
        body: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if body.get("version") != VERSION:
        return None
    try:
        parts = [Part(argv=part["argv"], started_at=part["started_at"],
                      commit=part["commit"], finished_at=part.get("finished_at"),
                      changed=list(part.get("changed", [])),
                      steps=[Step(**{**step, "load_average": tuple(step["load_average"])})
                             for step in part["steps"]])
                 for part in body["parts"]]
        return RunRecord(commit=str(body["commit"]), code=str(body["code"]),
                         cores=int(body["cores"]), parts=parts, path=path)
    except (KeyError, TypeError):
        return None
