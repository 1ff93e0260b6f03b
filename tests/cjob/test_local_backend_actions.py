"""The embedded runner's backend carries out every kind of action the lifecycle has (most
of a cluster's have nothing to do on one machine), and an action of no kind it knows
stops the runner instead of being ignored."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from action_examples import one_of_each
from operator_world import make_job

from cjob.local_backend import DriverLaunch, LocalBackend
from cjob_checkpoint.store.file import read_attempt
from cjob_lifecycle.actions import Action, CreateDriver, EmitEvent

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Unplanned:
    """Stands for a kind of action the backend was never taught."""


def backend(tmp_path: Path, events: list[EmitEvent]) -> LocalBackend:
    def launch_for(action: CreateDriver) -> DriverLaunch:
        # A command that cannot start: the backend records the failure as a pod would.
        return DriverLaunch(argv=(str(tmp_path / "no-such-driver"),), env={},
                            log=tmp_path / f"{action.name}.log")

    return LocalBackend(job=make_job(), store=tmp_path / "store", launch_for=launch_for,
                        on_event=events.append, on_start=lambda action, log: None,
                        clock=lambda: NOW)


class TestEveryKindOfAction:
    """Each kind has its case; the type checker proves it, these tests show it."""

    def test_the_runner_carries_out_every_kind(self, tmp_path: Path) -> None:
        events: list[EmitEvent] = []
        subject = backend(tmp_path, events)
        subject.execute(one_of_each("clicks"))
        assert read_attempt(str(tmp_path / "store")) == 2
        assert [event.message for event in events] == ["started attempt 2"]
        assert subject.live == []

    def test_an_action_of_no_known_kind_fails_loudly(self, tmp_path: Path) -> None:
        subject = backend(tmp_path, [])
        with pytest.raises(AssertionError, match="Unplanned"):
            subject.execute([cast(Action, Unplanned())])
