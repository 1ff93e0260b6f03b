"""``cjob``'s commands default to the same state directory as the embedded runner.

``cjob run`` writes a job's state where ``cjob status`` and ``cjob checkpoints list``
later look for it; with a default written in several places, changing one would make
the others report "no job" for a job that ran.
"""

from __future__ import annotations

import pytest

from cjob.cli import build_parser
from cjob.embedded import RunOptions


@pytest.mark.parametrize("argv", [
    ["run", "job.yaml"],
    ["status", "clicks"],
    ["checkpoints", "list", "clicks"],
], ids=["run", "status", "checkpoints list"])
def test_every_command_uses_the_embedded_runners_state_directory(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).state_dir == RunOptions().state_dir
