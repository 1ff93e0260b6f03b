"""Typed reads from one decoded JSON object, with errors that name the field.

Control messages and ``_metadata`` both arrive as JSON from another process (or
an older version of this runtime). Reading them field by field with a type check
turns a damaged or foreign document into one sentence naming what was wrong,
instead of a ``KeyError`` deep inside a task. Subclasses choose the error type.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self, TypeAlias

Json: TypeAlias = Any
"""A value made of dicts with string keys, lists, strings, numbers, booleans and None."""


class JsonFields:
    """One JSON object; ``where`` names it in errors (e.g. ``"a trigger message"``)."""

    error: ClassVar[type[ValueError]] = ValueError

    def __init__(self, data: Json, *, where: str) -> None:
        if not isinstance(data, dict):
            raise self.error(f"{where} must be a JSON object, got {type(data).__name__}")
        self._data: dict[str, Json] = data
        self._where = where

    @property
    def where(self) -> str:
        return self._where

    def has(self, name: str) -> bool:
        return name in self._data

    def _get(self, name: str) -> Json:
        if name not in self._data:
            raise self.error(f"{self._where} lacks the field {name!r}")
        return self._data[name]

    def _wrong(self, name: str, wanted: str, value: Json) -> ValueError:
        return self.error(f"field {name!r} of {self._where} must be {wanted}, "
                          f"got {type(value).__name__}")

    def integer(self, name: str) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, "an integer", value)
        return value

    def optional_integer(self, name: str) -> int | None:
        if self._data.get(name) is None:
            return None
        return self.integer(name)

    def number(self, name: str) -> float:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(name, "a number", value)
        return float(value)

    def optional_number(self, name: str) -> float | None:
        if self._data.get(name) is None:
            return None
        return self.number(name)

    def text(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def flag(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false", value)
        return value

    def object(self, name: str) -> dict[str, Json]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise self._wrong(name, "an object", value)
        return value

    def optional_object(self, name: str) -> dict[str, Json] | None:
        if self._data.get(name) is None:
            return None
        return self.object(name)

    def array(self, name: str) -> list[Json]:
        value = self._get(name)
        if not isinstance(value, list):
            raise self._wrong(name, "a list", value)
        return value

    def nested(self, name: str) -> Self:
        return type(self)(self._get(name), where=f"{name!r} of {self._where}")

    def child(self, data: Json, *, where: str) -> Self:
        """Another object read with the same error type (a list item, a map value)."""
        return type(self)(data, where=where)

    def value(self, name: str) -> Json:
        return self._data.get(name)
