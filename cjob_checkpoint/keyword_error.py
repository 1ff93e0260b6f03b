"""Errors whose parameters are typed keyword fields: one declaration instead of four.

An error of ours carries the facts that explain it (a ConfigMap's name, an
attempt, a URI) as attributes, builds its one-line message from them, and must
survive pickling: Spark and ``multiprocessing`` carry exceptions between
processes by pickle, and the default exception pickling calls the class with
its message as a positional argument, which a keyword-only constructor refuses.

Written by hand, every such class repeats the same constructor, attribute
assignments and ``__reduce__``. :func:`keyword_error` turns the field
declarations into all three (a keyword-only dataclass that keeps the
exception's identity, equality and repr); the class only says how its message
reads, in :meth:`describe`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, dataclass_transform

E = TypeVar("E", bound=BaseException)


def _rebuild(cls: type[BaseException], fields: dict[str, Any]) -> BaseException:
    return cls(**fields)


def _post_init(self: BaseException) -> None:
    BaseException.__init__(self, self.describe())  # type: ignore[attr-defined]


def _reduce(self: BaseException) -> tuple[Any, ...]:
    fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
    return (_rebuild, (type(self), fields))


@dataclass_transform(kw_only_default=True, eq_default=False)
def keyword_error(cls: type[E]) -> type[E]:
    """Make ``cls``'s annotated fields its keyword-only constructor, attributes and pickle.

    ``cls`` defines ``describe(self) -> str``, the message. A subclass that adds no
    fields needs no decorator; one that adds fields is decorated again.
    """
    if not callable(getattr(cls, "describe", None)):
        raise TypeError(f"{cls.__name__} must define describe(self) -> str")
    cls.__post_init__ = _post_init  # type: ignore[attr-defined]
    cls.__reduce__ = _reduce  # type: ignore[assignment,method-assign]
    return dataclasses.dataclass(kw_only=True, eq=False, repr=False)(cls)
