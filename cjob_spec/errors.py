"""Errors raised while reading a CheckpointedJob document.

Every error names the field it is about with a dotted path (``spec.checkpoint.retained``)
so a user can find the offending line at once, and renders as one line, because these
messages end up in ``kubectl describe`` events, CLI output and status conditions.
"""

from __future__ import annotations

from collections.abc import Mapping


class CjobSpecError(Exception):
    """Base class of every error this package raises on bad input."""


class SpecError(CjobSpecError):
    """A CheckpointedJob document is not valid.

    ``field`` is the dotted path of the offending value (``spec.parallelism``),
    ``problem`` says what is wrong with it, and ``hint`` optionally suggests a fix
    (for example the field name the user probably meant).
    """

    def __init__(self, *, field: str, problem: str, hint: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.field}: {self.problem}" if self.field else self.problem
        if self.hint:
            text += f" ({self.hint})"
        return text


class JobFileError(CjobSpecError):
    """A job file could not be read or is not one YAML mapping.

    ``line`` is 1-based when the YAML parser could tell where the problem is.
    """

    def __init__(self, *, file: str, problem: str, line: int | None = None) -> None:
        self.file = file
        self.problem = problem
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.problem}"


class DurationFormatError(CjobSpecError):
    """A text is not a Go-style duration such as ``10s``, ``1h30m`` or ``250ms``."""

    def __init__(self, *, text: str, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.problem}, got {self.text!r}"


class QuantityFormatError(CjobSpecError):
    """A text is not a memory quantity such as ``2Gi``, ``512Mi`` or ``2g``."""

    def __init__(self, *, text: str, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.problem}, got {self.text!r}"


def describe_value(value: object) -> str:
    """A user's value as an error message names it: its kind, and the value if short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a string ({shown!r})"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"
