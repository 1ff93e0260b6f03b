"""Settings of the operator that shape the objects it creates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cjob_spec.quantities import MIB

DEFAULT_SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class OperatorConfig:
    """How driver pods are built; the defaults suit a normal cluster."""

    runtime_command: tuple[str, ...] = ("python", "-m", "job_runtime", "run")
    """Command of the driver container; the runtime's flags are its arguments."""
    cleanup_command: tuple[str, ...] = ("python", "-m", "job_runtime", "cleanup")
    """Command of the cleanup pod, which deletes a deleted job's checkpoint data."""
    snapshot_command: tuple[str, ...] = ("python", "-m", "job_runtime")
    """Command of a snapshot pod; ``take-snapshot`` or ``dispose-snapshot`` follows."""
    image_pull_policy: str = "IfNotPresent"
    metrics_port: int = 9108
    driver_port: int = 7078
    block_manager_port: int = 7079
    ui_port: int = 4040
    termination_grace_seconds: int = 60
    """Time the driver gets after SIGTERM to stop its sources and finish cleanly."""
    memory_overhead_factor: float = 0.10
    """Non-heap memory of the driver container on top of the JVM heap, as in Spark."""
    min_memory_overhead_bytes: int = 384 * MIB
    service_account_dir: str = DEFAULT_SERVICE_ACCOUNT_DIR
    """Where the driver finds its service account token and CA (Spark client mode)."""
    extra_env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment of the driver container (for example proxy settings)."""
    default_image: str | None = None
    """The runtime image (Spark, Python and job_runtime) of jobs without ``spec.image``:
    the image the operator was installed with (``--runtime-image``). ``None``: such
    jobs fail with reason ``NoImage``."""
