"""Write the chart README's table of values from the comments of values.yaml.

Every value is documented once, above its key in ``values.yaml``: a comment that starts
with ``# --`` (continued by the comment lines after it) describes the key below it; a
map whose own key carries such a comment is one row (its default shown whole), and a
map without one is documented key by key. The README's "## Values" table is then
written from those comments, so that the two cannot drift apart:

    python scripts/chart_values.py           # rewrite the table in the README
    python scripts/chart_values.py --check   # exit 1, saying so, if it is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent / "charts" / "checkpointed-jobs"
KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][A-Za-z0-9]*):")
TABLE_HEADER = "| key | default | description |\n|---|---|---|\n"


@dataclass(frozen=True)
class Row:
    """One documented value: its dotted path, default and description."""

    path: str
    default: Any
    description: str

    def render(self) -> str:
        default = json.dumps(self.default, separators=(",", ":"))
        return f"| `{self.path}` | `{default}` | {self.description} |"


def _value_at(values: dict[str, Any], path: list[str]) -> Any:
    node: Any = values
    for key in path:
        node = node[key]
    return node


def rows(text: str) -> list[Row]:
    """The documented values of ``text`` (a values.yaml), in the file's order.

    A key is documented by the ``# --`` comment right above it; a map key without one
    is a section, whose keys are documented one by one. Raises ``ValueError`` naming
    a value that is documented nowhere."""
    values = yaml.safe_load(text) or {}
    stack: list[str] = []
    comment: list[str] | None = None
    documented_prefix: list[str] | None = None
    found: list[Row] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and comment is not None:
            comment.append(stripped[1:].strip())
            continue
        match = KEY.match(line)
        if not match or (stripped.startswith("-")):
            if not stripped:
                comment = None
            continue
        depth = len(match.group("indent")) // 2
        stack = [*stack[:depth], match.group("key")]
        if documented_prefix is not None and stack[:len(documented_prefix)] == documented_prefix \
                and len(stack) > len(documented_prefix):
            comment = None
            continue   # inside a map documented as a whole
        documented_prefix = None
        value = _value_at(values, stack)
        if comment is not None:
            found.append(Row(path=".".join(stack), default=value,
                             description=" ".join(comment)))
            if isinstance(value, dict) and value:
                documented_prefix = list(stack)
        elif not (isinstance(value, dict) and value):
            raise ValueError(f"values.yaml: {'.'.join(stack)} has no '# --' comment above it")
        comment = None
    return found


def table(text: str) -> str:
    return TABLE_HEADER + "\n".join(row.render() for row in rows(text)) + "\n"


def with_table(readme: str, new_table: str) -> str:
    """``readme`` with the table under its "## Values" heading replaced."""
    head, heading, rest = readme.partition("## Values\n")
    if not heading:
        raise ValueError("README.md has no '## Values' section")
    start = rest.index(TABLE_HEADER)
    end = start + len(TABLE_HEADER)
    lines = rest[end:].split("\n")
    kept = 0
    while kept < len(lines) and lines[kept].startswith("| `"):
        kept += 1
    return head + heading + rest[:start] + new_table + "\n".join(lines[kept:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only say whether the README's table is current")
    parser.add_argument("--chart", type=Path, default=CHART, help="the chart's folder")
    args = parser.parse_args(argv)
    readme_path = args.chart / "README.md"
    try:
        readme = readme_path.read_text()
        wanted = with_table(readme, table((args.chart / "values.yaml").read_text()))
    except ValueError as exc:
        print(f"chart_values: {exc}", file=sys.stderr)
        return 1
    if wanted == readme:
        return 0
    if args.check:
        print(f"chart_values: {readme_path} is not the table values.yaml documents; "
              "run: python scripts/chart_values.py", file=sys.stderr)
        return 1
    readme_path.write_text(wanted)
    print(f"wrote the table of values into {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
