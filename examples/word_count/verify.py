"""Verify the word-count output: every word of the input counted exactly once.

The job emits a word's running count after each occurrence, so the counts
emitted for a word, sorted, must be exactly 1, 2, ..., n where n is how often
the word occurs in the input. A lost occurrence leaves a gap or a smaller
total; a replayed one repeats a count. The expected counts are recomputed from
the text here, independently of the job. Exit code 0 and the verdict
``output exactly-once`` when it holds.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

WORD = re.compile(r"[a-z']+")


def count_words(directory: Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for path in sorted(directory.iterdir()):
        if path.name.startswith((".", "_")) or not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            counts.update(w.strip("'") for w in WORD.findall(line.lower()) if w.strip("'"))
    return counts


def read_output(directory: Path) -> list[dict[str, object]]:
    records = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith((".", "_")) or not path.is_file():
            continue
        with path.open() as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records


def verify(records: list[dict[str, object]], expected: collections.Counter[str]) -> list[str]:
    problems: list[str] = []
    emitted: dict[str, list[int]] = collections.defaultdict(list)
    for record in records:
        emitted[str(record["word"])].append(int(str(record["count"])))
    for word in sorted(set(expected) | set(emitted)):
        counts = sorted(emitted.get(word, []))
        want = list(range(1, expected.get(word, 0) + 1))
        if counts == want:
            continue
        if word not in expected:
            problems.append(f"{word!r}: not in the input, emitted {len(counts)} times")
        elif len(counts) < len(want):
            problems.append(f"{word!r}: {len(counts)} updates for {len(want)} occurrences "
                            f"(missing {len(want) - len(counts)})")
        elif len(counts) > len(want):
            problems.append(f"{word!r}: {len(counts)} updates for {len(want)} occurrences "
                            f"(extra {len(counts) - len(want)})")
        else:
            problems.append(f"{word!r}: running counts {counts[:10]} are not 1..{len(want)}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default="examples/word_count/data")
    parser.add_argument("--output", default=".cjob/output/word-count")
    ns = parser.parse_args()
    for directory in (Path(ns.input), Path(ns.output)):
        if not directory.is_dir():
            print(f"verify: no directory {directory}", file=sys.stderr)
            return 1
    expected = count_words(Path(ns.input))
    problems = verify(read_output(Path(ns.output)), expected)
    if problems:
        for problem in problems[:20]:
            print(f"verify: {problem}")
        print("verdict: output NOT exactly-once")
        return 1
    print(f"verdict: output exactly-once ({sum(expected.values())} words, "
          f"{len(expected)} distinct, every running count consistent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
