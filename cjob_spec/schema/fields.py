"""Schema nodes of the spec's defaulted fields, built from ``cjob_spec.defaults``.

Each field's default and bounds are written once, in ``cjob_spec.defaults``; the model
and the parser read them there, and these builders turn them into what the CRD states,
so the API server defaults and refuses exactly what the parser does.
"""

from __future__ import annotations

from enum import StrEnum

from cjob_spec.defaults import (
    DurationField,
    FlagField,
    IntegerField,
    MemoryField,
    NumberField,
    TextField,
)
from cjob_spec.durations import DURATION_PATTERN
from cjob_spec.schema.openapi import (
    BooleanSchema,
    IntegerSchema,
    IntOrStringSchema,
    NumberSchema,
    Rule,
    StringSchema,
)
from cjob_spec.schema.patterns import MEMORY_QUANTITY

DURATION_MAX_LENGTH = 64


def integer(spec_field: IntegerField, description: str | None = None) -> IntegerSchema:
    return IntegerSchema(description=description, minimum=spec_field.minimum,
                         maximum=spec_field.maximum, default=spec_field.default)


def number(spec_field: NumberField, description: str | None = None) -> NumberSchema:
    return NumberSchema(description=description, minimum=spec_field.minimum,
                        maximum=spec_field.maximum, default=spec_field.default)


def flag(spec_field: FlagField, description: str | None = None) -> BooleanSchema:
    return BooleanSchema(description=description, default=spec_field.default)


def choice(spec_field: TextField, values: type[StrEnum],
           description: str | None = None) -> StringSchema:
    """A field holding one of an enum's values (the model's enum, so a new member is
    offered by the CRD as soon as the model has it)."""
    members = tuple(member.value for member in values)
    if spec_field.default not in members:
        raise ValueError(f"{spec_field.path}: default {spec_field.default!r} not in {members}")
    return StringSchema(description=description, enum=members, default=spec_field.default)


def memory(spec_field: MemoryField, description: str | None = None) -> IntOrStringSchema:
    return IntOrStringSchema(description=description, pattern=MEMORY_QUANTITY,
                             default=spec_field.default)


def duration(spec_field: DurationField, description: str | None = None) -> StringSchema:
    """A Go duration string with the field's bounds as CEL rules (the API server's
    ``duration()`` reads the same syntax as ``cjob_spec.durations``)."""
    rules = [Rule(rule=f"duration(self) <= duration('{spec_field.maximum}')",
                  message=f"must be at most {spec_field.maximum}")]
    if spec_field.minimum_seconds > 0:
        rules.append(Rule(rule=f"duration(self) >= duration('{spec_field.minimum}')",
                          message=f"must be at least {spec_field.minimum}"))
    if spec_field.positive:
        rules.append(Rule(rule="duration(self) > duration('0s')",
                          message="must be greater than 0"))
    return StringSchema(description=description, max_length=DURATION_MAX_LENGTH,
                        pattern=DURATION_PATTERN, default=spec_field.default,
                        rules=tuple(rules))
