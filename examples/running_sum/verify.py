"""Verify the running-sum output: every input counted exactly once.

For each key the job emits its running sum after every record. Sorted, the
emitted sums of a key must step by exactly the key's input values, each once:
a lost record leaves a value out, a duplicated one repeats a step or overshoots
the total. Exit code 0 and the verdict ``output exactly-once`` when it holds.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def read_output(directory: Path) -> list[dict[str, int]]:
    records = []
    for path in sorted(directory.iterdir()):
        if path.name.startswith((".", "_")) or not path.is_file():
            continue
        with path.open() as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records


def read_s3_output(url: str) -> list[dict[str, int]]:
    """The committed records under ``s3://bucket/prefix``: the endpoint comes from
    ``S3_ENDPOINT`` (the cluster quick start's s3.env) or ``AWS_ENDPOINT_URL``."""
    import os

    import boto3
    from botocore.config import Config

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    client = boto3.client(
        "s3",
        endpoint_url=os.environ.get("S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL"),
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}),
    )
    records = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            relative = obj["Key"][len(prefix):]
            if any(part.startswith((".", "_")) for part in relative.split("/")):
                continue
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
            records.extend(json.loads(line) for line in body.splitlines() if line.strip())
    return records


def verify(records: list[dict[str, int]], *, count: int, keys: int = 97) -> list[str]:
    problems: list[str] = []
    emitted: dict[int, list[int]] = collections.defaultdict(list)
    for record in records:
        emitted[record["key"]].append(record["value"])
    expected: dict[int, list[int]] = collections.defaultdict(list)
    for seq in range(count):
        expected[seq % keys].append(seq)
    if len(records) != count:
        problems.append(f"{len(records)} records emitted, expected {count}")
    for key in range(keys):
        values = sorted(emitted.get(key, []))
        steps = [b - a for a, b in zip([0, *values], values, strict=False)]
        if key == 0 and values and values[0] == 0:
            steps[0] = 0
        if sorted(steps) != sorted(expected[key]):
            missing = len(expected[key]) - len(values)
            problems.append(f"key {key}: {len(values)} updates for {len(expected[key])} inputs"
                            f" ({'missing' if missing > 0 else 'extra'} {abs(missing)})"
                            if missing else f"key {key}: running sums are inconsistent")
        elif values and values[-1] != sum(expected[key]):
            problems.append(f"key {key}: final sum {values[-1]} != {sum(expected[key])}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=".cjob/output/running-sum")
    parser.add_argument("--s3", metavar="S3_URL",
                        help="read the output from s3://bucket/prefix instead of a folder")
    parser.add_argument("--count", type=int, default=200_000)
    ns = parser.parse_args()
    if ns.s3:
        records = read_s3_output(ns.s3)
    else:
        directory = Path(ns.output)
        if not directory.is_dir():
            print(f"verify: no output at {directory}", file=sys.stderr)
            return 1
        records = read_output(directory)
    problems = verify(records, count=ns.count)
    if problems:
        for problem in problems[:20]:
            print(f"verify: {problem}")
        print("verdict: output NOT exactly-once")
        return 1
    print(f"verdict: output exactly-once ({ns.count} inputs, every running sum consistent)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
