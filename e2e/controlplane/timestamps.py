"""Timestamps as the Kubernetes API writes them: seconds for conditions and states,
microseconds for a Lease's ``renewTime`` (and the node's own log)."""

from __future__ import annotations

import datetime as dt


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
