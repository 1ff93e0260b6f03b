"""Values of the document that are not sections read field by field: any JSON value
(``spec.job.args``, the Kubernetes objects of ``spec.pod``), maps of strings (labels,
annotations, node selectors) and DNS labels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe

DNS_LABEL_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def string_map(value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise SpecError(field=f"{path}.{key}", problem="keys and values must be strings")
        result[key] = item
    return result


def check_json_value(value: object, path: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(field=path, problem=f"must be a finite number, got {value}")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_json_value(item, f"{path}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(field=path, problem=f"keys must be strings, got {_describe(key)}")
            check_json_value(item, f"{path}.{key}")
        return
    raise SpecError(
        field=path,
        problem=f"must be a JSON value (string, number, boolean, list or mapping), "
        f"got {_describe(value)}",
        hint="quote dates and times" if "date" in type(value).__name__ else None,
    )
