"""python -m e2e.lakereader install: make the table reader's virtualenv and fetch the
connectors' jars into the cache (``make test`` does it beside the unit tests)."""

from __future__ import annotations

import argparse
import sys

from e2e.lakereader.reader_env import PYSPARK, ReaderInstallError, ensure_reader_env, is_installed
from e2e.maven_jars import FetchFailedError, MissingToolError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.lakereader", description=__doc__)
    parser.add_argument("command", choices=("install",))
    parser.parse_args(argv)
    if not is_installed():
        print(f"installing the table reader (PySpark {PYSPARK} with the Delta and Iceberg "
              f"connectors; a minute or two the first time)", flush=True)
    try:
        env = ensure_reader_env()
    except (ReaderInstallError, FetchFailedError, MissingToolError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"table reader: {env.python} with the jars of {env.jars}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
