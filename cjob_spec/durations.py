"""Go-style durations (``10s``, ``5m``, ``1h30m``, ``250ms``).

The CheckpointedJob spec uses the duration syntax of Go's ``time.ParseDuration``
because it is what Kubernetes users write everywhere and because the API server's CEL
``duration()`` function accepts exactly that syntax, so the CRD and this parser agree
on what is valid. Negative durations are refused: no setting here means anything
negative.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cjob_spec.errors import DurationFormatError

_UNIT_SECONDS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}

_COMPONENT = re.compile(r"([0-9]+)(?:\.([0-9]+))?(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
DURATION_PATTERN = "^(0|([0-9]+(\\.[0-9]+)?(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)$"
"""The same syntax as a regular expression (the CRD uses it as its ``pattern``). Not a
raw string: the micro sign and the Greek mu are the characters themselves, which RE2
(the API server's pattern engine) matches as ``re`` does; it reads no ``\\u`` escape."""


def parse_duration_seconds(text: str) -> float:
    """Return the number of seconds ``text`` denotes, or raise DurationFormatError.

    The syntax is Go's without signs and without bare fractions (``.5s``): one or more
    ``<number><unit>`` components, units ``h m s ms us ns``; ``0`` alone is zero.
    """
    if text == "0":
        return 0.0
    if text.startswith("-"):
        raise DurationFormatError(text=text, problem="must not be negative")
    total = 0.0
    position = 0
    while position < len(text) or position == 0:
        match = _COMPONENT.match(text, position)
        if match is None:
            raise DurationFormatError(
                text=text,
                problem="must be a duration like '10s', '5m', '1h30m' or '250ms' "
                "(units: h, m, s, ms, us, ns)",
            )
        whole, fraction, unit = match.groups()
        value = float(f"{whole}.{fraction}") if fraction else float(whole)
        total += value * _UNIT_SECONDS[unit]
        position = match.end()
    return total


def format_seconds(seconds: float) -> str:
    """Render seconds for a command line: ``10`` for whole numbers, ``0.25`` otherwise."""
    if seconds == int(seconds):
        return str(int(seconds))
    return repr(round(seconds, 9))


@dataclass(frozen=True)
class Duration:
    """A parsed duration that remembers how the user wrote it."""

    seconds: float
    text: str

    @classmethod
    def parse(cls, text: str) -> Duration:
        return cls(seconds=parse_duration_seconds(text), text=text)

    def __str__(self) -> str:
        return self.text


MAX_DURATION = Duration.parse("8760h")
"""The longest duration any setting accepts: one year.

Longer values mean nothing for a checkpoint interval, a timeout or a restart backoff,
and unbounded ones broke far from the document: date arithmetic overflows beyond the
year 9999 and the API server's CEL ``duration()`` beyond about 292 years. The CRD
carries the same bound as a CEL rule on every duration field.
"""
