"""What each keyed operator's state depends on, written into every checkpoint.

A restore hands operator ``uid``'s state to whatever operator of that ``uid`` the
new pipeline has. That is right only while the operator is the same kind, keyed
the same way, with the same state layout: a ``reduce`` turned ``aggregate``, a key
of other columns, a window of another size or an aggregate added would read the
old state as something it is not. So the coordinator writes, with each checkpoint,
one :class:`~cjob_checkpoint.metadata.OperatorDescriptor` per keyed operator
(``_metadata`` version 4), and the driver compares them with the new pipeline's
before it runs (:mod:`job_runtime.execution.driver.compatibility`).

Only what the pipeline fixes is described: a ``process`` function's own states
are named at run time, so its layout is empty, and a key function is ``function``.
An ``enrich`` operator's state is its table, whole in every subtask and not keyed:
its stream's key is not described (it may change freely), its table's key is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from cjob_checkpoint.metadata import OperatorDescriptor
from job_runtime.execution.stages import StagePlan
from job_runtime.pipeline import KeyBy, KeyedKind, KeyedOp

KEY_FUNCTION = "function"


def describe_key(key: KeyBy) -> str:
    columns = key.columns
    return KEY_FUNCTION if columns is None else ",".join(columns)


def describe_state(op: KeyedOp) -> str:
    """The layout the pipeline gives the operator's state: its aggregates, its
    window, an enrichment's table key, as canonical JSON (empty when it has none)."""
    layout: dict[str, object] = {}
    if op.aggregates:
        layout["aggregates"] = [list(spec) for spec in op.aggregates]
    if op.window is not None:
        layout["window"] = op.window.describe()
    if op.table is not None:
        layout["table"] = op.table.key
    return json.dumps(layout, sort_keys=True, separators=(",", ":")) if layout else ""


def describe_operators(stages: Sequence[StagePlan]) -> tuple[OperatorDescriptor, ...]:
    """One descriptor per keyed operator, in stage order."""
    return tuple(
        OperatorDescriptor(uid=stage.keyed.uid, kind=stage.keyed.kind.value, stage=stage.index,
                           key=("" if stage.keyed.kind is KeyedKind.ENRICH
                                else describe_key(stage.keyed.key)),
                           state=describe_state(stage.keyed))
        for stage in stages if stage.keyed is not None)
