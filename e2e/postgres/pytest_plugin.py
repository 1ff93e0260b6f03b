"""pytest fixtures for tests against a real PostgreSQL server.

Enable with ``"e2e.postgres.pytest_plugin"`` in ``pytest_plugins`` of the root
``conftest.py``. Fixtures:

- ``postgres_server`` (session): one running :class:`~e2e.postgres.server.PostgresServer`
  for the whole run (a start costs a second or two, a database a tenth of one),
  stopped at its end; ``.dsn()`` connects to its ``postgres`` database, and
  ``.create_database(name)`` makes another.
- ``postgres_dsn`` (function): the connection string of a new, empty database of the
  test's own, named after it (``t_<test name>_<8 hex digits>``) and dropped after it,
  so tests share the server and nothing else.

Without the Debian package ``postgresql`` the tests that use the server fail with a
line saying what to install rather than skip: a missing server must not look like a
passing tier.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from e2e.postgres.install import MissingPostgresError
from e2e.postgres.names import database_name_for
from e2e.postgres.server import PostgresServer, PostgresStartError, scratch_dir

__all__ = ["PostgresServer", "postgres_dsn", "postgres_server"]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    # Not in tmp_path_factory's folder: under root the server's user could not enter it.
    work_dir = scratch_dir()
    server = PostgresServer(work_dir=work_dir, die_with_parent=True)
    try:
        try:
            server.start()
        except (MissingPostgresError, PostgresStartError) as exc:
            pytest.fail(str(exc), pytrace=False)
        yield server
    finally:
        server.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    name = database_name_for(request.node.name)
    dsn = postgres_server.create_database(name)
    yield dsn
    postgres_server.drop_database(name)
