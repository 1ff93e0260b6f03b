"""The driver's settings: the attempt's runtime settings (the ``--settings`` document or
the same fields as flags, :mod:`cjob_spec.runtime_settings`) and the process's role.

Its own module because the driver, the Spark starter and the restore resolution
all read it, and none of them should import another to get it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cjob_spec import defaults, model
from cjob_spec.runtime_settings import DEFAULT_LOCAL_MASTER
from job_runtime.coordinator.checkpoint_settings import CheckpointSettings
from job_runtime.execution.driver.store import MEMORY_STORE, StoreAddress


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriverSettings:
    job_name: str
    job_uid: str
    entrypoint: str
    python_path: tuple[str, ...] = ()
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    parallelism: int = defaults.PARALLELISM.default
    max_parallelism: int = defaults.MAX_PARALLELISM.default
    master: str = DEFAULT_LOCAL_MASTER
    spark_conf: dict[str, str] = dataclasses.field(default_factory=dict)
    checkpoint_storage: str = ""
    checkpoint: CheckpointSettings = dataclasses.field(default_factory=CheckpointSettings)
    sink_stall_timeout: float = defaults.SINK_STALL_TIMEOUT.default_value().seconds
    """``spec.health.sinkStallTimeout`` in seconds (0: never), for every sink writer."""
    mode: model.CheckpointMode = model.DEFAULT_CHECKPOINT_MODE
    unaligned: bool = False
    retained: int = defaults.RETAINED.default
    restore: str = defaults.RESTORE_FROM.default
    restore_exact: bool = False
    """Restore ``restore`` even when the store holds newer checkpoints (a redeploy)."""
    on_unreadable: model.OnUnreadable = model.DEFAULT_ON_UNREADABLE
    allow_foreign_restore: bool = False
    """``restore`` may be another job's checkpoint path (``spec.restore.allowForeignJob``)."""
    allow_non_restored_state: bool = False
    """A restore may drop state the pipeline no longer maps
    (``spec.restore.allowNonRestoredState``)."""
    attempt: int = 1
    store: StoreAddress = MEMORY_STORE
    """The completed-checkpoint store (``--store``), read once."""
    metrics_port: int | None = None
    status_file: str | None = None
    task_attempts: int = 4
    credits: int = 4
    state_backend: model.StateBackend = model.DEFAULT_STATE_BACKEND
    """``spec.state.backend``."""
    state_dir: str = ""
    """Local working directory of the ``rocksdb`` backend; empty: Spark's scratch dir."""
    standby_file: str | None = None
    """Run as a warm standby: start Spark, then wait for a promotion in this file
    (:mod:`cjob_spec.standby_signal`), which names the attempt to take over."""
    standby_pod: str | None = None
    """Run as the warm standby pod of this name: the promotion comes through the
    ConfigMap store (``--store configmap:...``). ``attempt`` is the lowest it takes."""
    standby_ready_file: str | None = None
    """Where a standby pod says it is ready (its readiness probe tests the file)."""
    beacon_host: str | None = None
    """Listen for standby drivers at this address (the pod's own) and record where in
    the ConfigMap store; a standby pod with it watches the active driver's beacon and
    reports the driver lost when it dies (:mod:`cjob_spec.driver_beacon`)."""

    @property
    def is_standby(self) -> bool:
        return self.standby_file is not None or self.standby_pod is not None

    @property
    def job_id(self) -> str:
        return f"{self.job_name}-{self.job_uid}"


