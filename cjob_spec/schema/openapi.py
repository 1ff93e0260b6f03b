"""The OpenAPI v3 structural schema of a CRD, as typed values.

A CRD's schema is what the API server checks and defaults a document with; the parser
checks the same document again for ``cjob run``, which has no API server. Writing the
schema as values (instead of YAML) lets both read one description: the parser takes a
section's field names from ``ObjectSchema.properties``, and ``document()`` renders the
YAML the CRD file holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def cel_matches(pattern: str, *, subject: str = "self") -> str:
    """A CEL ``matches`` call for a regular expression written for Python's ``re``.

    CEL strings unescape backslashes once, so each is doubled; the regular expressions
    used here are written in the syntax both RE2 and ``re`` read the same way.
    """
    return f"{subject}.matches('{pattern.replace(chr(92), chr(92) * 2)}')"


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One ``x-kubernetes-validations`` entry: a CEL rule and the message it fails with."""

    rule: str
    message: str
    field_path: str | None = None
    """Where the API server reports the failure (``.endpoint``), when not the node."""

    def document(self) -> dict[str, Any]:
        body: dict[str, Any] = {"rule": self.rule}
        if self.field_path is not None:
            body["fieldPath"] = self.field_path
        body["message"] = self.message
        return body


@dataclass(frozen=True, kw_only=True)
class Schema:
    """What every schema node may carry: a description and CEL rules."""

    description: str | None = None
    rules: tuple[Rule, ...] = ()

    def document(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.description is not None:
            body["description"] = self.description
        body.update(self.body())
        if self.rules:
            body["x-kubernetes-validations"] = [rule.document() for rule in self.rules]
        return body

    def body(self) -> dict[str, Any]:
        raise NotImplementedError


def _present(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are set, in their order (schemas omit unset keys)."""
    return {key: value for key, value in values.items() if value is not None}


@dataclass(frozen=True, kw_only=True)
class StringSchema(Schema):
    enum: tuple[str, ...] | None = None
    format: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    default: str | None = None

    def body(self) -> dict[str, Any]:
        return {"type": "string", **_present(
            enum=list(self.enum) if self.enum is not None else None, format=self.format,
            minLength=self.min_length, maxLength=self.max_length, pattern=self.pattern,
            default=self.default)}


@dataclass(frozen=True, kw_only=True)
class IntegerSchema(Schema):
    minimum: int | None = None
    maximum: int | None = None
    default: int | None = None

    def body(self) -> dict[str, Any]:
        return {"type": "integer", **_present(minimum=self.minimum, maximum=self.maximum,
                                              default=self.default)}


@dataclass(frozen=True, kw_only=True)
class NumberSchema(Schema):
    minimum: float | None = None
    maximum: float | None = None
    default: float | None = None

    def body(self) -> dict[str, Any]:
        return {"type": "number", **_present(minimum=_plain(self.minimum),
                                             maximum=_plain(self.maximum),
                                             default=_plain(self.default))}


def _plain(number: float | None) -> float | int | None:
    """``2`` rather than ``2.0`` for a whole number, as a person writes it."""
    if number is not None and float(number).is_integer():
        return int(number)
    return number


@dataclass(frozen=True, kw_only=True)
class BooleanSchema(Schema):
    default: bool | None = None

    def body(self) -> dict[str, Any]:
        return {"type": "boolean", **_present(default=self.default)}


@dataclass(frozen=True, kw_only=True)
class IntOrStringSchema(Schema):
    """A value that is an integer or a string (memory quantities, checkpoint ids)."""

    pattern: str | None = None
    default: str | None = None

    def body(self) -> dict[str, Any]:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
                **_present(pattern=self.pattern, default=self.default)}


@dataclass(frozen=True, kw_only=True)
class ArraySchema(Schema):
    items: Schema
    max_items: int | None = None
    map_keys: tuple[str, ...] | None = None
    """Keys of a ``map`` list (its items merged by these on apply)."""

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": "array", **_present(maxItems=self.max_items)}
        if self.map_keys is not None:
            body["x-kubernetes-list-type"] = "map"
            body["x-kubernetes-list-map-keys"] = list(self.map_keys)
        body["items"] = self.items.document()
        return body


@dataclass(frozen=True, kw_only=True)
class ObjectSchema(Schema):
    properties: Mapping[str, Schema] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    defaulted: bool = False
    """Whether the API server fills in an absent object (``default: {}``), so that the
    defaults of its fields show in the stored document."""
    values: Schema | None = None
    """The schema of every value of a free-keyed map (``additionalProperties``)."""
    max_properties: int | None = None
    preserve_unknown: bool = False
    """Whether fields the schema does not name are kept (Kubernetes objects passed
    through, ``spec.job.args``)."""

    @property
    def property_names(self) -> tuple[str, ...]:
        return tuple(self.properties)

    def child(self, key: str) -> ObjectSchema:
        """The object schema of field ``key`` (of a list's items, for a list)."""
        node = self.properties[key]
        if isinstance(node, ArraySchema):
            node = node.items
        if not isinstance(node, ObjectSchema):
            raise TypeError(f"{key} is not an object in the schema")
        return node

    def at(self, path: str) -> ObjectSchema:
        """The object schema at a dotted path below this one (``checkpoint.s3``)."""
        node = self
        for key in path.split("."):
            node = node.child(key)
        return node

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": "object"}
        if self.required:
            body["required"] = list(self.required)
        if self.defaulted:
            body["default"] = {}
        if self.max_properties is not None:
            body["maxProperties"] = self.max_properties
        if self.values is not None:
            body["additionalProperties"] = self.values.document()
        if self.preserve_unknown:
            body["x-kubernetes-preserve-unknown-fields"] = True
        if self.properties:
            body["properties"] = {key: node.document() for key, node in self.properties.items()}
        return body
