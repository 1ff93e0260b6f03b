"""``python -m job_runtime check-state``: whether a checkpoint's state fits a pipeline,
before any driver runs (what ``cjob validate JOB --against CHECKPOINT`` asks).

It builds the job's pipeline from its code, reads the checkpoint's ``_metadata`` and
runs the same comparison the driver runs before a restore
(:mod:`job_runtime.execution.driver.compatibility`), with the same sentences. The
answer is its output: one line per mismatch, or one line saying the state fits,
and the exit code the driver would end with (0, or 10 ``IncompatibleState``; 2 or 3
for a job whose code cannot be loaded, 6 for a checkpoint that cannot be read).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from cjob_checkpoint.checkpoint_storage import read_metadata
from cjob_checkpoint.metadata import CheckpointMetadata, MetadataError
from cjob_checkpoint.store.completed_store import UnreadableCheckpointError
from cjob_spec.exit_codes import ExitCode
from job_runtime.errors import (
    EntrypointError,
    PipelineDefinitionError,
    UserCodeError,
)
from job_runtime.execution.driver.compatibility import incompatibilities
from job_runtime.execution.entrypoint import add_python_path, build_pipeline
from job_runtime.execution.operator_descriptors import describe_operators
from job_runtime.execution.stages import plan_stages


def check_state(*, entrypoint: str, python_path: Sequence[str], args: Mapping[str, Any],
                checkpoint: str, out: TextIO = sys.stdout) -> int:
    """Print whether ``checkpoint``'s state fits the job's pipeline; the exit code."""
    add_python_path(python_path)
    try:
        pipeline = build_pipeline(entrypoint=entrypoint, args=args, name="check")
        stages = plan_stages(pipeline)
    except (EntrypointError, PipelineDefinitionError) as exc:
        out.write(f"error: {exc}\n")
        return ExitCode.BAD_CONFIG
    except UserCodeError as exc:
        out.write(f"error: {exc}\n")
        return ExitCode.USER_CODE_ERROR
    try:
        metadata = CheckpointMetadata.from_bytes(read_metadata(checkpoint))
    except UnreadableCheckpointError as exc:
        out.write(f"error: cannot read the checkpoint {checkpoint}: {exc.cause}\n")
        return ExitCode.RESTORE_FAILED
    except MetadataError as exc:
        out.write(f"error: cannot read the checkpoint {checkpoint}: {exc}\n")
        return ExitCode.RESTORE_FAILED
    pipeline_operators = describe_operators(stages)
    found = incompatibilities(metadata, pipeline_operators)
    if not found:
        held = sorted(uid for uid, handles in metadata.operators.items() if handles)
        out.write(f"checkpoint {metadata.checkpoint_id} of job {metadata.job} fits the "
                  f"pipeline: state of {len(held)} operator(s) restores "
                  f"({', '.join(held) or 'none'})\n")
        return ExitCode.FINISHED
    out.write(f"checkpoint {metadata.checkpoint_id} of job {metadata.job} does not fit the "
              f"pipeline (a restore fails with IncompatibleState unless "
              f"spec.restore.allowNonRestoredState drops this state):\n")
    for problem in found:
        out.write(f"  {problem.describe()}\n")
    return ExitCode.INCOMPATIBLE_STATE


def parse_args_json(text: str) -> dict[str, Any]:
    """``--args-json``: a JSON object, or a ``ValueError`` saying what it is instead."""
    args = json.loads(text)
    if not isinstance(args, dict):
        raise ValueError("--args-json must be a JSON object")
    return args

