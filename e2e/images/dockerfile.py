"""Just enough of the Dockerfile syntax to know what a build reads.

The image builder needs two facts from each Dockerfile: which paths of the build
context it copies (so that their content can key the build cache) and the default of
``ARG BASE_IMAGE`` (the base tag the Dockerfile expects). The Dockerfile tests use the
same parser, so the build and its checks can never read a Dockerfile differently.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword (upper case), its argument text, its first line."""

    keyword: str
    arguments: str
    line: int


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions with their continuation lines joined and comments dropped.

    Comment lines inside a continued instruction are skipped, as Docker does; parser
    directives such as ``# syntax=`` are comments here.
    """
    instructions: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
    if pending:
        raise ValueError(f"{path}: the last instruction ends with a line continuation")
    return instructions


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    """The default value of every ``ARG NAME=value`` (a later one wins)."""
    args: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.arguments:
            name, _, default = ins.arguments.partition("=")
            args[name.strip()] = default.strip()
    return args


def _words(arguments: str) -> list[str]:
    """The words of a COPY/ADD: JSON (exec) form or shell-like form."""
    text = arguments.strip()
    flags: list[str] = []
    while text.startswith("--"):
        flag, _, text = text.partition(" ")
        flags.append(flag)
        text = text.lstrip()
    if text.startswith("["):
        parsed = json.loads(text)
        if not isinstance(parsed, list) or not all(isinstance(w, str) for w in parsed):
            raise ValueError(f"not a JSON list of strings: {text}")
        return [*flags, *parsed]
    return [*flags, *shlex.split(text)]


def copy_sources(ins: Instruction) -> list[str]:
    """Build-context paths a COPY or ADD reads (none for ``COPY --from=<stage>``)."""
    if ins.keyword not in ("COPY", "ADD"):
        return []
    words = _words(ins.arguments)
    if any(w.startswith("--from=") for w in words):
        return []
    paths = [w for w in words if not w.startswith("--")]
    return paths[:-1]


def context_sources(instructions: list[Instruction]) -> list[str]:
    """Every build-context path the Dockerfile copies, in order, without duplicates."""
    seen: dict[str, None] = {}
    for ins in instructions:
        for source in copy_sources(ins):
            seen.setdefault(source, None)
    return list(seen)
