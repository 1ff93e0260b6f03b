"""Settings a subtask needs, shipped from the driver inside the Spark closure."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubtaskConfig:
    job_id: str
    job_name: str
    attempt: int
    entrypoint: str
    python_path: tuple[str, ...]
    args: dict[str, Any]
    parallelism: int
    max_parallelism: int
    coordinator_host: str
    coordinator_port: int
    checkpoint_root: str
    staging_uri: str
    mode: str  # "exactly_once" | "at_least_once"
    unaligned: bool
    credits: int = 4
    s3: dict[str, Any] | None = None
    progress_interval: float = 1.0
