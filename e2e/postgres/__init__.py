"""A real PostgreSQL server for tests and local runs, from Debian's package, without Docker.

``PostgresServer`` makes a throwaway cluster in a folder and runs its server on
loopback; ``create_database`` gives each user a database of its own. ``python -m
e2e.postgres up|down|status`` runs one in the background. See ``README.md``.
"""

from e2e.postgres.install import MissingPostgresError, find_bin_dir
from e2e.postgres.names import check_database_name, database_name_for
from e2e.postgres.server import PostgresServer, PostgresStartError, scratch_dir

__all__ = [
    "MissingPostgresError",
    "PostgresServer",
    "PostgresStartError",
    "check_database_name",
    "database_name_for",
    "find_bin_dir",
    "scratch_dir",
]
