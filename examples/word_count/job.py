"""Running word counts over text files, exactly once.

Every line is split into words (lower case letters and apostrophes); for each
word the job emits its running count after every occurrence. ``delay_ms``
slows the reading of each line down, so that a driver kill lands mid-run in a
demonstration on two small files.
"""

from __future__ import annotations

import re
import time
from typing import Any

from job_runtime import Pipeline, sinks, sources

WORD = re.compile(r"[a-z']+")


def tokenize(line: str) -> list[str]:
    return [w.strip("'") for w in WORD.findall(line.lower()) if w.strip("'")]


def build(p: Pipeline) -> None:
    delay = float(p.args.get("delay_ms", 0)) / 1000.0

    def words(record: dict[str, Any]) -> list[dict[str, Any]]:
        if delay:
            time.sleep(delay)
        return [{"word": w, "count": 1} for w in tokenize(record["line"])]

    (p.source(sources.files(p.args["input"], format="text",
                            batch_size=int(p.args.get("batch_size", 2))))
      .flat_map(words)
      .key_by("word")
      .reduce(lambda a, b: {"word": a["word"], "count": a["count"] + b["count"]})
      .sink(sinks.files(p.args["output"], format="jsonl")))
