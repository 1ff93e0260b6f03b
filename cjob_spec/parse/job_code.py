"""``spec.job``: the job's code, its entry point, ``pythonPath`` entries (directories or
``s3://`` zip archives) and its JSON arguments."""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping
from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe
from cjob_spec.model import JobCode
from cjob_spec.parse.node import Node
from cjob_spec.parse.values import check_json_value
from cjob_spec.schema import patterns

ENTRYPOINT_PATTERN = re.compile(patterns.ENTRYPOINT)
S3_CODE_PATTERN = re.compile(patterns.S3_CODE_ARCHIVE)
URL_PATTERN = re.compile(patterns.URL_SCHEME)


def read_job_code(node: Node) -> JobCode:
    entrypoint = node.required_string("entrypoint")
    if not ENTRYPOINT_PATTERN.match(entrypoint) or any(
        keyword.iskeyword(part) for part in re.split(r"[.:]", entrypoint)
    ):
        raise SpecError(
            field="spec.job.entrypoint",
            problem="must be 'module:function' made of Python identifiers "
            f"(for example 'clicks.job:build'), got {entrypoint!r}",
        )
    raw_path = node.get("pythonPath")
    python_path: list[str] = []
    if raw_path is not None:
        if not isinstance(raw_path, list):
            raise SpecError(
                field="spec.job.pythonPath",
                problem=f"must be a list of paths, got {_describe(raw_path)}",
            )
        for index, item in enumerate(raw_path):
            if not isinstance(item, str) or not item.strip():
                raise SpecError(
                    field=f"spec.job.pythonPath[{index}]",
                    problem=f"must be a non-empty string, got {_describe(item)}",
                )
            _check_python_path_entry(item, f"spec.job.pythonPath[{index}]")
            python_path.append(item)
    raw_args = node.get("args")
    args: dict[str, Any] = {}
    if raw_args is not None:
        if not isinstance(raw_args, Mapping):
            raise SpecError(
                field="spec.job.args", problem=f"must be a mapping, got {_describe(raw_args)}"
            )
        for key, item in raw_args.items():
            if not isinstance(key, str):
                raise SpecError(
                    field="spec.job.args", problem=f"keys must be strings, got {_describe(key)}"
                )
            check_json_value(item, f"spec.job.args.{key}")
            args[key] = item
    return JobCode(entrypoint=entrypoint, python_path=tuple(python_path), args=args)


def _check_python_path_entry(entry: str, path: str) -> None:
    """A directory path (absolute, or relative to the driver's working directory; to
    the job file's folder with ``cjob run``) or one ``s3://bucket/key.zip`` archive.

    Other URLs are refused here rather than when the driver starts: ``sys.path``
    would take them as a directory name that never exists, and the job would only
    fail later with a puzzling "module not found".
    """
    if entry != entry.strip():
        raise SpecError(field=path, problem=f"must not start or end with spaces, got {entry!r}")
    if entry.startswith("s3://"):
        if not S3_CODE_PATTERN.match(entry):
            raise SpecError(
                field=path,
                problem=f"an s3:// entry must name a zip archive of the job's modules, "
                f"s3://bucket/path/code.zip, got {entry!r}",
                hint="zip the folder's contents (its modules and packages at the top level)",
            )
        return
    if URL_PATTERN.match(entry):
        scheme = entry.partition("://")[0]
        raise SpecError(
            field=path,
            problem=f"must be a directory path or an s3://bucket/path/code.zip archive, "
            f"got {entry!r}",
            hint="write s3:// for S3" if scheme.lower() in ("s3a", "s3n") else None,
        )
