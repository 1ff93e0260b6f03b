"""Benchmark 6 (placeholder): recovery and scheduling through the operator.

Measuring the operator path (driver pod killed -> operator notices -> new
driver pod from the latest checkpoint -> first record) needs the operator and
the local kwok/kube-apiserver control plane; it is not implemented here yet.
This command records that it was not measured instead of a number.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.common import target_entry, update_summary, write_result

NOTE = ("not measured: needs the operator and the kwok control plane "
        "(e2e/controlplane); to be implemented with the operator scenarios")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=1)


def run(ns: argparse.Namespace) -> dict[str, Any]:
    print(f"operator benchmark: {NOTE}", flush=True)
    data = {"met": None, "value": None, "note": NOTE}
    write_result("operator", data)
    update_summary({
        "operator_recovery_seconds": target_entry(
            value=None, target=15.0, unit="s from driver pod killed to first record after "
            "restore (operator mode)", met=None, note=NOTE),
    })
    return data
