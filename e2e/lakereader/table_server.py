"""Reads Delta and Iceberg tables with Spark, one request at a time (run by the
reader's own Python, see :mod:`e2e.lakereader.reader_env`; it imports nothing of ours).

A Spark session costs seconds to start and a read a fraction of one, so one process
serves a whole test run: each line on stdin is a request (JSON, ``version`` 1), each
answer one line on the descriptor given as ``--answers``: ``{"version": 1, "rows":
[...]}`` or ``{"version": 1, "error": "..."}``. Anything Spark or its JVM prints goes
to stderr, never among the answers.

- ``{"format": "delta", "location": path}``: the table read as Delta, through its log.
- ``{"format": "iceberg", "catalog": {"name", "uri", "warehouse"}, "table": "ns.name"}``:
  the table loaded through its catalog (Iceberg's JDBC catalog on the embedded
  catalog's SQLite file), in a Spark session of its own, since a catalog is looked up
  by name once per session and every test's catalog has the same name.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any

VERSION = 1


def session(jars: str) -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[1]").appName("lake-reader")
            .config("spark.jars", ",".join(sorted(glob.glob(os.path.join(jars, "*.jar")))))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.databricks.delta.snapshotPartitions", "1")
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog",
                    "org.apache.spark.sql.delta.catalog.DeltaCatalog")
            .getOrCreate())


def read(spark: Any, request: dict[str, Any]) -> list[Any]:
    if request.get("format") == "delta":
        frame = spark.read.format("delta").load(request["location"])
    elif request.get("format") == "iceberg":
        catalog = request["catalog"]
        own = spark.newSession()
        prefix = f"spark.sql.catalog.{catalog['name']}"
        own.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
        own.conf.set(f"{prefix}.type", "jdbc")
        own.conf.set(f"{prefix}.uri", catalog["uri"])
        own.conf.set(f"{prefix}.warehouse", catalog["warehouse"])
        frame = own.table(f"`{catalog['name']}`.{request['table']}")
    else:
        raise ValueError(f"no such table format: {request.get('format')!r}")
    return [json.loads(row) for row in frame.toJSON().collect()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--answers", type=int, required=True)
    ns = parser.parse_args()
    answers = os.fdopen(ns.answers, "w")
    os.dup2(2, 1)  # what Spark's JVM and py4j print must not mix with the answers
    spark = session(ns.jars)
    answers.write(json.dumps({"version": VERSION, "ready": True}) + "\n")
    answers.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if request.get("version") != VERSION:
                raise ValueError(f"request version {request.get('version')!r}, "
                                 f"this reader speaks {VERSION}")
            answer: dict[str, Any] = {"version": VERSION, "rows": read(spark, request)}
        except Exception as exc:  # answered, and the next request is served
            answer = {"version": VERSION, "error": f"{type(exc).__name__}: {exc}"[:4000]}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
