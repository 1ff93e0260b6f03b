"""pytest fixture ``lake_reader`` (session): one :class:`~e2e.lakereader.LakeReader`
for the run, started at its first use (the reader's virtualenv and jars made first if
the cache lacks them) and stopped at the run's end.

A reader that cannot be installed or started fails the test with the reason rather
than skipping it: a table Spark was never asked to read must not look readable.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.lakereader.reader_env import ReaderInstallError, ensure_reader_env
from e2e.lakereader.table_reader import LakeReader, LakeReadError
from e2e.maven_jars import FetchFailedError, MissingToolError

__all__ = ["lake_reader"]


@pytest.fixture(scope="session")
def lake_reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LakeReader]:
    try:
        env = ensure_reader_env()
    except (ReaderInstallError, FetchFailedError, MissingToolError) as exc:
        pytest.fail(str(exc), pytrace=False)
    reader = LakeReader(env=env, work_dir=tmp_path_factory.mktemp("lake-reader"))
    try:
        try:
            reader.start()
        except LakeReadError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield reader
    finally:
        reader.close()
