"""Settings a subtask needs, shipped from the driver inside the Spark closure.

The closure travels over Spark's own channels (in-process or loopback in local
mode; authenticated and encrypted Spark RPC on Kubernetes, see ``spark_start``),
which is how the per-attempt ``key`` reaches the subtasks and nobody else. The
attempt itself is not here: a standby's subtasks start before it is promoted, so they
learn it when they register (:class:`~job_runtime.coordinator.messages.Registered`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cjob_spec.model import CheckpointMode, StateBackend

LOOPBACK = "127.0.0.1"
"""What local mode binds and advertises, driver and subtasks alike: every subtask
runs on the driver's machine, and nothing else can reach a loopback address."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubtaskConfig:
    job_id: str
    job_name: str
    entrypoint: str
    python_path: tuple[str, ...]
    args: dict[str, Any]
    parallelism: int
    max_parallelism: int
    coordinator_host: str
    coordinator_port: int
    checkpoint_root: str
    staging_uri: str
    mode: CheckpointMode
    unaligned: bool
    credits: int = 4
    s3: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    """The driver's S3 settings, credentials included: left out of the repr, since a
    config turns up in logs and Spark's task descriptions."""
    progress_interval: float = 1.0
    key: bytes = dataclasses.field(default=b"", repr=False)
    """The attempt's secret: every coordinator and channel connection proves it."""
    state_backend: StateBackend = StateBackend.HASHMAP
    """``spec.state.backend``."""
    state_dir: str = ""
    """Local working directory of the ``rocksdb`` backend; empty: Spark's scratch dir."""
    loopback: bool = False
    """Local mode: channel listeners bind :data:`LOOPBACK`, nothing else can reach them."""
    sink_stall_timeout: float = 0.0
    """Seconds a sink may fail to deliver a completed checkpoint's output before the
    attempt ends as stalled (``spec.health.sinkStallTimeout``; 0: never)."""
    staged_inputs: dict[str, str] = dataclasses.field(default_factory=dict)
    """Input name -> the published staged copy its readers read (``SourceContext``)."""
    epoch: int = 1
    """Which launch of the barrier stage this is, counted by the driver from 1: the
    subtasks of a relaunch say a larger one, so the coordinator tells them from the
    zombies of an earlier launch."""
