"""Importing the user's ``module:function`` and building the pipeline it describes."""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

from job_runtime.errors import EntrypointError, PipelineDefinitionError, UserCodeError
from job_runtime.pipeline import Pipeline


def add_python_path(paths: Iterable[str]) -> None:
    """Put ``paths`` in front of ``sys.path``, in order: the first entry wins, as in
    ``PYTHONPATH``. Entries already on ``sys.path`` stay where they are."""
    new = [path for path in dict.fromkeys(paths) if path and path not in sys.path]
    sys.path[0:0] = new


def load_build_function(entrypoint: str) -> Any:
    module_name, sep, function_name = entrypoint.partition(":")
    if not sep or not module_name or not function_name:
        raise EntrypointError(entrypoint=entrypoint, problem="expected the form module:function")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise EntrypointError(entrypoint=entrypoint,
                              problem=f"module {exc.name!r} not found (check job.pythonPath)"
                              ) from None
    except Exception as exc:
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise UserCodeError(operator="import", subtask=-1, details=details) from exc
    fn = getattr(module, function_name, None)
    if fn is None or not callable(fn):
        raise EntrypointError(entrypoint=entrypoint,
                              problem=f"module {module_name!r} has no function {function_name!r}")
    return fn


def build_pipeline(*, entrypoint: str, args: Mapping[str, Any], name: str) -> Pipeline:
    fn = load_build_function(entrypoint)
    pipeline = Pipeline(args=args, name=name)
    try:
        fn(pipeline)
    except PipelineDefinitionError:
        raise
    except Exception as exc:
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise UserCodeError(operator="build", subtask=-1, details=details) from exc
    pipeline.validate()
    return pipeline
