"""No product module holds more than one file's worth of roles.

A module past :data:`MOST_LINES` has, every time so far, held several roles (the
coordinator's RPC, epochs, commits and views; the Kafka source's plan, brokers,
reader and decoding); the rule makes the cut happen when the module grows, not in a
review months later. Tests, benchmarks and the test harness are not held to it.
"""

from __future__ import annotations

from pathlib import Path

from paths import REPO

MOST_LINES = 600
PRODUCT = ("job_runtime", "cjob_checkpoint", "cjob_spec", "cjob_lifecycle", "cjob",
           "operator/cjob_operator")


def long_modules(root: Path, *, most: int) -> dict[str, int]:
    """Modules under ``root`` longer than ``most`` lines, by path relative to ``root``'s
    parent."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > most:
            found[str(path.relative_to(root.parent))] = lines
    return found


def test_no_product_module_is_longer_than_six_hundred_lines() -> None:
    long = {name: lines for package in PRODUCT
            for name, lines in long_modules(REPO / package, most=MOST_LINES).items()}
    assert long == {}, (f"modules over {MOST_LINES} lines (cut each along its roles, "
                        f"and name the new modules in docs/architecture.md's code map)")


def test_a_long_module_is_named_with_its_length(tmp_path: Path) -> None:
    package = tmp_path / "package"
    package.mkdir()
    (package / "short.py").write_text("x = 1\n" * 3)
    (package / "long.py").write_text("x = 1\n" * 7)
    assert long_modules(package, most=5) == {"package/long.py": 7}
