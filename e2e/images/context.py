"""The build context as an image build sees it, and content hashes of it.

An image archive is reused only while everything its build reads is unchanged. The
build reads the Dockerfile and the paths its COPY instructions name, filtered by
``.dockerignore``; this module lists those files with Docker's ignore rules and
hashes their names, executable bits and contents.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A regular expression for one ignore pattern (Go ``filepath.Match`` plus ``**``)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise ValueError(f"unterminated character class in ignore pattern {pattern!r}")
            body = pattern[i + 1 : end]
            if body.startswith("^"):
                body = "!" + body[1:]
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end + 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(f"^{out}$")


@dataclass(frozen=True)
class IgnoreRule:
    """One ``.dockerignore`` line: a pattern, re-including when it started with ``!``."""

    pattern: str
    regex: re.Pattern[str]
    include: bool


@dataclass(frozen=True)
class DockerIgnore:
    """The rules of a ``.dockerignore`` file, applied as Docker applies them."""

    rules: tuple[IgnoreRule, ...]

    @classmethod
    def parse(cls, text: str) -> DockerIgnore:
        rules: list[IgnoreRule] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            pattern = os.path.normpath(line.removeprefix("!").strip()).strip("/")
            if pattern in ("", "."):
                continue
            rules.append(IgnoreRule(pattern, _pattern_regex(pattern), include))
        return cls(tuple(rules))

    @classmethod
    def load(cls, context: Path) -> DockerIgnore:
        """The context's ``.dockerignore``, or no rules when there is none."""
        path = context / ".dockerignore"
        return cls.parse(path.read_text()) if path.is_file() else cls(())

    def includes(self, relative: str) -> bool:
        """Whether a context-relative path reaches the build.

        The last rule matching the path or one of its parent folders decides, so
        ``*`` followed by ``!src/`` keeps everything below ``src``.
        """
        parts = [p for p in relative.strip("/").split("/") if p and p != "."]
        candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        included = True
        for rule in self.rules:
            if any(rule.regex.match(c) for c in candidates):
                included = rule.include
        return included


def context_files(*, context: Path, sources: Iterable[str], ignore: DockerIgnore) -> list[str]:
    """Context-relative paths of the files (and symbolic links) the sources copy.

    A missing source is an error here, as it would be in the build.
    """
    found: set[str] = set()
    for source in sources:
        relative = os.path.normpath(source).strip("/")
        path = context / relative
        if not path.exists() and not path.is_symlink():
            raise FileNotFoundError(f"COPY source {source!r} is missing from {context}")
        if path.is_dir() and not path.is_symlink():
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                for name in files:
                    rel = (Path(folder) / name).relative_to(context).as_posix()
                    if ignore.includes(rel):
                        found.add(rel)
                for name in dirs:
                    child = Path(folder) / name
                    if child.is_symlink():
                        rel = child.relative_to(context).as_posix()
                        if ignore.includes(rel):
                            found.add(rel)
        elif ignore.includes(relative):
            found.add(Path(relative).as_posix())
    return sorted(found)


def hash_files(*, context: Path, files: Iterable[str]) -> str:
    """One SHA-256 over the names, kinds, executable bits and contents of ``files``."""
    digest = hashlib.sha256()
    for rel in files:
        path = context / rel
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            kind, content = "link", os.readlink(path).encode()
        else:
            kind = "exec" if info.st_mode & stat.S_IXUSR else "file"
            content = hashlib.sha256(path.read_bytes()).digest()
        digest.update(f"{rel}\0{kind}\0".encode())
        digest.update(content)
        digest.update(b"\0")
    return digest.hexdigest()
