"""``spec.restartPolicy``: its type, the restart budget and the backoff between attempts."""

from __future__ import annotations

from cjob_spec import defaults
from cjob_spec.errors import SpecError
from cjob_spec.model import Backoff, RestartPolicy, RestartPolicyType
from cjob_spec.parse.node import Node

MAX_RESTARTS = defaults.MAX_RESTARTS.maximum
MAX_BACKOFF_MULTIPLIER = defaults.BACKOFF_MULTIPLIER.maximum


def read_restart_policy(node: Node) -> RestartPolicy:
    backoff = node.child("backoff", _read_backoff, default=Backoff)
    return RestartPolicy(
        type=node.enum_field(defaults.RESTART_TYPE, RestartPolicyType),
        max_restarts=node.integer_field(defaults.MAX_RESTARTS),
        backoff=backoff,
        reset_after=node.duration_field(defaults.RESET_AFTER),
        start_timeout=node.duration_field(defaults.START_TIMEOUT),
    )


def _read_backoff(node: Node) -> Backoff:
    initial = node.duration_field(defaults.BACKOFF_INITIAL)
    maximum = node.duration_field(defaults.BACKOFF_MAX)
    if maximum.seconds < initial.seconds:
        raise SpecError(
            field="spec.restartPolicy.backoff.max",
            problem=f"must be >= initial ({initial.text}), got {maximum.text!r}",
        )
    return Backoff(
        initial=initial, max=maximum, multiplier=node.number_field(defaults.BACKOFF_MULTIPLIER)
    )
