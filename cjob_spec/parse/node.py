"""The reader every section of the document is read with: ``Node``, one mapping, its
dotted path and its schema, with typed reads (strings, integers, numbers, flags, enums,
durations, memory quantities, the fields of ``cjob_spec.defaults``) whose errors name
the field, and the "did you mean" hint for a misspelt key or enum value.

The fields a section may hold are those of its schema (``cjob_spec.schema``), the one
the CRD is rendered from, so a field the CRD offers is one the parser reads.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import TypeVar

from cjob_spec.defaults import (
    DurationField,
    FlagField,
    IntegerField,
    MemoryField,
    NumberField,
    TextField,
)
from cjob_spec.durations import MAX_DURATION, Duration
from cjob_spec.errors import DurationFormatError, QuantityFormatError, SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.quantities import Memory
from cjob_spec.schema.openapi import ObjectSchema, StringSchema

_E = TypeVar("_E", bound=StrEnum)
_T = TypeVar("_T")


def _shorten(text: str) -> str:
    """At most 40 characters of a user's value, so a message stays one readable line."""
    return text if len(text) <= 40 else text[:37] + "..."


def suggest(word: str, choices: Iterable[str]) -> str | None:
    options = list(choices)
    lowered = {choice.lower(): choice for choice in options}
    if word.lower() in lowered:
        return f"did you mean {lowered[word.lower()]!r}?"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


class Node:
    """One mapping of the document being read, with its dotted path and its schema.

    Refuses keys its schema does not name (with a "did you mean" hint) unless
    ``lenient`` or the schema keeps unknown fields.
    """

    def __init__(
        self, value: object, path: str, schema: ObjectSchema, *, lenient: bool = False
    ) -> None:
        if not isinstance(value, Mapping):
            raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
        self.path = path
        self.schema = schema
        self.allowed = schema.property_names
        lenient = lenient or schema.preserve_unknown
        self.values: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(field=path, problem=f"keys must be strings, got {_describe(key)}")
            if key not in self.allowed and not lenient:
                raise SpecError(
                    field=self.at(key),
                    problem="unknown field",
                    hint=suggest(key, self.allowed),
                )
            self.values[key] = item

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> object | None:
        return self.values.get(key)

    def require(self, key: str) -> object:
        value = self.values.get(key)
        if value is None:
            raise SpecError(field=self.at(key), problem="required field is missing")
        return value

    def string(self, key: str, *, default: str | None = None) -> str | None:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise SpecError(field=self.at(key), problem=f"must be a string, got {_describe(value)}")
        if not value.strip():
            raise SpecError(field=self.at(key), problem="must not be empty")
        self.check_length(key, value)
        return value

    def check_length(self, key: str, value: str) -> None:
        """Refuse a string longer than the schema lets the API server store."""
        field_schema = self.schema.properties.get(key)
        limit = field_schema.max_length if isinstance(field_schema, StringSchema) else None
        if limit is not None and len(value) > limit:
            raise SpecError(field=self.at(key),
                            problem=f"must be at most {limit} characters, got {len(value)}")

    def required_string(self, key: str) -> str:
        self.require(key)
        value = self.string(key)
        assert value is not None
        return value

    def integer(
        self, key: str, *, default: int, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(
                field=self.at(key), problem=f"must be an integer, got {_describe(value)}"
            )
        if minimum is not None and value < minimum:
            raise SpecError(field=self.at(key), problem=f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise SpecError(
                field=self.at(key), problem=f"must be <= {maximum}, got {_shorten(str(value))}"
            )
        return value

    def integer_field(self, field: IntegerField) -> int:
        return self.integer(field.key, default=field.default, minimum=field.minimum,
                            maximum=field.maximum)

    def number_field(self, field: NumberField) -> float:
        return self.number(field.key, default=field.default, minimum=field.minimum,
                           maximum=field.maximum)

    def duration_field(self, field: DurationField) -> Duration:
        return self.duration(field.key, default=field.default, positive=field.positive,
                             minimum=field.minimum_seconds or None,
                             maximum=Duration.parse(field.maximum))

    def memory_field(self, field: MemoryField) -> Memory:
        return self.memory(field.key, default=field.default)

    def flag_field(self, field: FlagField) -> bool:
        return self.boolean(field.key, default=field.default)

    def enum_field(self, field: TextField, enum_type: type[_E]) -> _E:
        return self.enum(field.key, enum_type, default=enum_type(field.default))

    def number(self, key: str, *, default: float, minimum: float, maximum: float) -> float:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(field=self.at(key), problem=f"must be a number, got {_describe(value)}")
        if not math.isfinite(value) or value < minimum:
            raise SpecError(field=self.at(key), problem=f"must be >= {minimum:g}, got {value:g}")
        if value > maximum:
            raise SpecError(field=self.at(key), problem=f"must be <= {maximum:g}, got {value:g}")
        return float(value)

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(
                field=self.at(key), problem=f"must be true or false, got {_describe(value)}"
            )
        return value

    def enum(self, key: str, enum_type: type[_E], *, default: _E) -> _E:
        value = self.get(key)
        if value is None:
            return default
        choices = [member.value for member in enum_type]
        if isinstance(value, str):
            for member in enum_type:
                if member.value == value:
                    return member
        raise SpecError(
            field=self.at(key),
            problem=f"must be one of {', '.join(choices)}, got {_describe(value)}",
            hint=suggest(value, choices) if isinstance(value, str) else None,
        )

    def duration(
        self,
        key: str,
        *,
        default: str,
        positive: bool = False,
        minimum: float | None = None,
        maximum: Duration = MAX_DURATION,
    ) -> Duration:
        value = self.get(key)
        if value is None:
            return Duration.parse(default)
        if not isinstance(value, str):
            raise SpecError(
                field=self.at(key),
                problem=f"must be a duration string like '10s' or '5m', got {_describe(value)}",
            )
        try:
            duration = Duration.parse(value)
        except DurationFormatError as error:
            raise SpecError(field=self.at(key), problem=str(error)) from None
        if positive and duration.seconds <= 0:
            raise SpecError(field=self.at(key), problem=f"must be greater than 0, got {value!r}")
        if minimum is not None and duration.seconds < minimum:
            raise SpecError(
                field=self.at(key), problem=f"must be at least {minimum:g}s, got {value!r}"
            )
        if not duration.seconds <= maximum.seconds:
            raise SpecError(
                field=self.at(key),
                problem=f"must be at most {maximum.text}, got {_shorten(value)!r}",
            )
        return duration

    def memory(self, key: str, *, default: str) -> Memory:
        value = self.get(key)
        if value is None:
            return Memory.parse(default)
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise SpecError(
                field=self.at(key),
                problem=f"must be a memory quantity like '2Gi' or '512m', got {_describe(value)}",
            )
        try:
            return Memory.parse(str(value))
        except QuantityFormatError as error:
            raise SpecError(field=self.at(key), problem=str(error)) from None

    def section(self, key: str) -> Node:
        """The required mapping ``key``, read against its schema."""
        return Node(self.require(key), self.at(key), self.schema.child(key))

    def child(self, key: str, read: Callable[[Node], _T], *, default: Callable[[], _T]) -> _T:
        """The optional mapping ``key`` read by ``read``, or ``default()`` when absent."""
        value = self.get(key)
        if value is None:
            return default()
        return read(Node(value, self.at(key), self.schema.child(key)))
