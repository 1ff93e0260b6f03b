"""``spec.autoscaler``: the bounds and targets of the parallelism the operator chooses."""

from __future__ import annotations

from cjob_spec import defaults
from cjob_spec.errors import SpecError
from cjob_spec.model import AutoscalerMode, AutoscalerSpec
from cjob_spec.parse.node import Node


def read_autoscaler(node: Node, *, max_parallelism: int) -> AutoscalerSpec:
    """The section, with its bounds checked against each other and the job's
    ``maxParallelism`` (a parallelism above it could not hold the job's key groups)."""
    spec = AutoscalerSpec(
        mode=node.enum_field(defaults.AUTOSCALER_MODE, AutoscalerMode),
        min=node.integer_field(defaults.AUTOSCALER_MIN),
        max=node.integer_field(defaults.AUTOSCALER_MAX),
        target_lag=node.duration_field(defaults.AUTOSCALER_TARGET_LAG),
        target_utilization=node.number_field(defaults.AUTOSCALER_TARGET_UTILIZATION),
        stabilization=node.duration_field(defaults.AUTOSCALER_STABILIZATION),
    )
    if spec.max > max_parallelism:
        raise SpecError(field=node.at("max"), problem=f"must be <= maxParallelism "
                        f"({max_parallelism}), got {spec.max}")
    upper = spec.upper(max_parallelism)
    if spec.min > upper:
        bound = f"max ({spec.max})" if spec.max else f"maxParallelism ({max_parallelism})"
        raise SpecError(field=node.at("min"), problem=f"must be <= {bound}, got {spec.min}")
    return spec
