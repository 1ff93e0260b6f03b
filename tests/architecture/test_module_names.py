"""Within one package, no two modules share a name.

Six ``base.py`` and two ``settings.py`` in one package made every traceback, import
and review comment ask "which one?"; a module named by its role answers it. Packages
are the top-level ones a reader finds in the code map (the runtime, the checkpoint
store, the spec, the lifecycle planner, the operator, the test harness, the
benchmarks). What every package of one kind has by convention (``__init__``,
``__main__``, a harness tier's ``pytest_plugin``, an example's ``job`` and ``verify``)
is exempt, and so is the same name in two different packages: ``cjob/cli.py`` and
``job_runtime/cli.py`` are the command lines of two programs.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from paths import REPO

PACKAGES = ("job_runtime", "cjob_checkpoint", "cjob_spec", "cjob_lifecycle", "cjob",
            "operator/cjob_operator", "e2e", "bench")
CONVENTIONAL = frozenset({"__init__", "__main__", "conftest", "pytest_plugin"})


def shared_names(root: Path) -> dict[str, list[str]]:
    """Module names used more than once under ``root``, with their paths."""
    paths: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.stem not in CONVENTIONAL:
            paths[path.stem].append(str(path.relative_to(root.parent)))
    return {name: found for name, found in paths.items() if len(found) > 1}


def test_no_two_modules_of_a_package_share_a_name() -> None:
    shared = {name: found for package in PACKAGES
              for name, found in shared_names(REPO / package).items()}
    assert shared == {}, "modules of one package sharing a name: rename each by its role"


def test_modules_sharing_a_name_are_named_with_their_paths(tmp_path: Path) -> None:
    package = tmp_path / "package"
    for folder in ("sinks", "sources"):
        (package / folder).mkdir(parents=True)
        (package / folder / "base.py").write_text("")
        (package / folder / "__init__.py").write_text("")
    (package / "sinks" / "files_sink.py").write_text("")
    assert shared_names(package) == {"base": ["package/sinks/base.py", "package/sources/base.py"]}
