"""The test tree keeps the rules its layout depends on (see docs/testing.md)."""

from __future__ import annotations

import collections
import re

from paths import REPO, SUPPORT

TESTS = REPO / "tests"
PARENTS = re.compile(r"Path\(__file__\)[^\n]*\.parents\[\d\]")


def test_no_test_counts_parent_folders_to_find_the_repository() -> None:
    """A test moved into a tier folder sits one level deeper: counting parents then
    finds the wrong folder, and it did. ``paths.REPO`` is right wherever a test lives."""
    offenders = [str(path.relative_to(REPO)) for path in TESTS.rglob("*.py")
                 if path.parent != SUPPORT and PARENTS.search(path.read_text())]
    assert offenders == []


def test_test_module_names_are_unique_across_the_tree() -> None:
    """pytest imports test modules by their file name; two of the same name collide."""
    names = collections.Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


def test_no_test_lives_outside_the_tests_folder() -> None:
    """Harness packages (``e2e/``) hold harness code only; their tests live under tests/."""
    stray = [str(path.relative_to(REPO)) for path in (REPO / "e2e").rglob("test_*.py")]
    assert stray == []
