"""The worker daemon's import path: PySpark's installed package before Spark's zips.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on every
Python worker's path. A module imported from a zip is compiled from its source at
every import (zipimport neither reads nor writes cached bytecode), so ``import
pyspark.worker`` in the daemon took about a second more than from the installed
package on a busy machine: part of every job's start and every relaunch.

When PySpark is installed with pip, ``SPARK_HOME`` is the installed package, and
the zips lie inside its folder and hold the same files, byte for byte. Only then does
the daemon move the zips behind the rest of its path, so the installed package and
its cached bytecode are imported instead. A Spark distribution whose zip is the only
PySpark, or one with another PySpark installed beside it, keeps the path Spark gave.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

Finder = Callable[[str, list[str]], "ModuleSpec | None"]


def _find(name: str, path: list[str]) -> ModuleSpec | None:
    return PathFinder.find_spec(name, path)


def is_spark_zip(entry: str) -> bool:
    """Whether a path entry is one of the zips Spark gives its Python workers."""
    name = os.path.basename(entry)
    return name.endswith(".zip") and name.startswith(("pyspark", "py4j"))


def installed_first(path: Sequence[str], *, find: Finder = _find) -> list[str]:
    """``path`` with Spark's zips moved to its end when the rest of it finds the
    PySpark package those zips belong to; otherwise ``path`` as it is."""
    zips = [entry for entry in path if is_spark_zip(entry)]
    if not zips:
        return list(path)
    rest = [entry for entry in path if not is_spark_zip(entry)]
    spec = find("pyspark", rest)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        return list(path)
    package = Path(locations[0]).resolve()
    if not all(Path(entry).resolve().is_relative_to(package) for entry in zips):
        return list(path)
    return rest + zips
