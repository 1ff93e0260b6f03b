"""Errors cross process boundaries by pickle (Spark ships executor failures to the driver):
every error of ours declared with keyword fields comes back whole, message and fields."""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import pkgutil
from typing import Any

import pytest

import cjob_checkpoint
import job_runtime
from cjob_checkpoint.keyword_error import keyword_error
from job_runtime.sinks.failures import SinkFailureKind

SAMPLES: dict[str, Any] = {"str": "s3://bucket/job/chk-7", "int": 7, "object": "seven",
                          "float": 61.5,
                          "tuple[tuple[str, int, int], ...]": (("s3://bucket/job", 2, 1),),
                          "tuple[str, ...]": ("operator 'sum' holds state",),
                          "SinkFailureKind": SinkFailureKind.STALLED}


def keyword_errors() -> list[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for package in (cjob_checkpoint, job_runtime):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, BaseException)
                        and dataclasses.is_dataclass(value)):
                    found.add(value)
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


ERRORS = keyword_errors()


def test_the_errors_of_the_store_storage_and_runtime_are_found() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"FencedError", "StorageError", "StoreAccessDeniedError", "UserCodeError"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_an_error_survives_pickling_with_its_fields_and_message(cls: type[BaseException]) -> None:
    fields = {f.name: SAMPLES[str(f.type)] for f in dataclasses.fields(cls)  # type: ignore[arg-type]
              if f.default is dataclasses.MISSING}
    error = cls(**fields)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error) and str(error)
    assert all(getattr(copy, name) == value for name, value in fields.items())


def test_an_error_without_a_message_is_refused_when_it_is_declared() -> None:
    with pytest.raises(TypeError, match="describe"):
        @keyword_error
        class Speechless(Exception):
            cause: str
