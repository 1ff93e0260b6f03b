"""The code map in ``docs/architecture.md`` names every module of ours.

The map is where a reader finds which module does what; one left out is a module
nobody can find from the documentation, and the map says to update it with every
change of layout. A module counts as named when its section of the map (the
``### <package>`` heading) quotes it in backticks: as its path below the package
(``execution/driver/fence``), the end of that path (``kafka/markers``), or its bare
name (inside a folder's list, ``sources/`` then ``union``, ``base``, …), with or
without ``.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

from paths import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
PACKAGES = {
    "job_runtime": "job_runtime",
    "cjob_checkpoint": "cjob_checkpoint",
    "cjob_spec": "cjob_spec",
    "cjob_lifecycle": "cjob_lifecycle",
    "cjob": "cjob",
    "cjob_operator": "operator/cjob_operator",
    "e2e": "e2e",
    "bench": "bench",
}
"""A section of the map (its heading's first word) -> the folder of that package."""


def map_sections(text: str) -> dict[str, str]:
    code_map = text[text.index("## Code map"):]
    sections = re.split(r"^### ", code_map, flags=re.MULTILINE)[1:]
    return {section.split(maxsplit=1)[0]: section for section in sections}


def quoted_names(section: str) -> set[str]:
    """Every word the section quotes, as a path or a name without ``.py`` or a slash."""
    names = set()
    for quoted in re.findall(r"`([^`]+)`", section):
        for word in re.split(r"[\s,()]+", quoted):
            names.add(word.strip().rstrip("/").removesuffix(".py"))
    return names


def unnamed_modules(folder: Path, named: set[str]) -> list[str]:
    missing = []
    for path in sorted(folder.rglob("*.py")):
        module = path.relative_to(folder).with_suffix("")
        if module.name == "__init__" or "__pycache__" in module.parts:
            continue
        suffixes = {"/".join(module.parts[i:]) for i in range(len(module.parts))}
        if not suffixes & named:
            missing.append(module.as_posix())
    return missing


def test_every_module_of_every_package_is_in_the_code_map() -> None:
    sections = map_sections(ARCHITECTURE.read_text())
    missing = {package: unnamed_modules(REPO / folder, quoted_names(sections.get(package, "")))
               for package, folder in PACKAGES.items()}
    assert {package: names for package, names in missing.items() if names} == {}, (
        "modules the code map in docs/architecture.md does not name (add each to its "
        "package's table, with its role)")


def test_a_module_left_out_of_the_map_is_named() -> None:
    section = "| sinks | `sinks/` (`arrival`, `base`, `files`) |"
    assert unnamed_modules(REPO / "job_runtime" / "sinks", quoted_names(section))[:1] == [
        "commit"]
