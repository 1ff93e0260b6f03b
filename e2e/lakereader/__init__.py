"""Our Delta and Iceberg tables read back by Spark, with the connectors' own readers.

See :mod:`e2e.lakereader.reader_env` for why the reader is a Spark of its own and
:mod:`e2e.lakereader.table_reader` for how a test asks it (the ``lake_reader``
fixture of :mod:`e2e.lakereader.pytest_plugin`).
"""

from e2e.lakereader.reader_env import ReaderEnv, ReaderInstallError, ensure_reader_env
from e2e.lakereader.table_reader import LakeReader, LakeReadError, TableFormat

__all__ = ["LakeReadError", "LakeReader", "ReaderEnv", "ReaderInstallError", "TableFormat",
           "ensure_reader_env"]
