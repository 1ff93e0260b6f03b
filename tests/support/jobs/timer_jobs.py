"""A ``process()`` job with event-time timers and TTL state for the runtime tests: the
sessions example's hand-written sessions (``examples/sessions/job.py``, checked by
its ``verify.py --numbered``), over clicks of the clicks-per-minute format, with the
knobs the example does not need: a pause per batch, and a subtask that kills itself
once at a given click.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from window_jobs import slow_or_crash

import job_runtime
from job_runtime import Pipeline, sinks, sources, watermarks
from job_runtime.durations import duration_ms

# The repository holds both the runtime and the examples.
_EXAMPLE = Path(job_runtime.__file__).resolve().parent.parent / "examples" / "sessions" / "job.py"
_spec = importlib.util.spec_from_file_location("sessions_example_job", _EXAMPLE)
assert _spec is not None and _spec.loader is not None
sessions_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sessions_example)


def sessions_by_timers(p: Pipeline) -> None:
    """Per-user sessions of ``gap`` (default 2s), by timers."""
    by_hand = sessions_example.SessionsByHand(duration_ms(p.args.get("gap", "2s"), what="gap"))
    (p.source(sources.files(p.args["input"], format="jsonl",
                            batch_size=int(p.args.get("batch_size", 500))),
              watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="5s"))
      .map_batches(slow_or_crash(p))
      .key_by("user")
      .process(by_hand.on_click, on_timer=by_hand.on_timer)
      .sink(sinks.files(p.args["output"], format="jsonl")))
