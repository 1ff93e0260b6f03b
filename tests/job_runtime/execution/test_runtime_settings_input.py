"""The driver takes its settings as one document (``--settings``) or as flags, not both.

Supervisors pass the document; a person writes flags. Either way a mistake ends the
driver before Spark starts, with exit code 2 and one line saying what is wrong.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from cjob_spec.exit_codes import ExitCode
from cjob_spec.model import CheckpointMode
from cjob_spec.runtime_settings import RuntimeSettings
from job_runtime.cli import build_parser, main, settings_from_args

DOCUMENT = RuntimeSettings(job_name="clicks", job_uid="u-1", entrypoint="clicks.job:build",
                           checkpoint_storage="file:///data/ckpt", attempt=4,
                           checkpoint_mode=CheckpointMode.AT_LEAST_ONCE).encode()


@pytest.fixture(autouse=True)
def sigterm_as_it_was() -> Iterator[None]:
    """``main`` makes SIGTERM end the process at once, as a driver's must; not pytest's."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_the_document_and_the_same_flags_give_the_same_driver_settings() -> None:
    from_document = settings_from_args(build_parser().parse_args(["run", "--settings", DOCUMENT]))
    from_flags = settings_from_args(build_parser().parse_args([
        "run", "--job-name", "clicks", "--job-uid", "u-1", "--entrypoint", "clicks.job:build",
        "--checkpoint-storage", "file:///data/ckpt", "--attempt", "4",
        "--checkpoint-mode", "at_least_once"]))
    assert from_document == from_flags
    assert from_document.mode is CheckpointMode.AT_LEAST_ONCE and from_document.attempt == 4


def test_the_roles_flags_go_beside_the_document() -> None:
    settings = settings_from_args(build_parser().parse_args(
        ["run", "--settings", DOCUMENT, "--credits", "2", "--standby", "/tmp/promotion"]))
    assert settings.credits == 2 and settings.standby_file == "/tmp/promotion"


@pytest.mark.parametrize(("argv", "message"), [
    (["--settings", DOCUMENT, "--restore", "latest"],
     "either as --settings or as flags, not both (also given: --restore)"),
    (["--settings", '{"version": 9}'], "runtime settings: format version 9 is not 1"),
    (["--settings", "{"], "runtime settings are not JSON"),
    (["--job-name", "clicks"],
     "required: --job-uid, --entrypoint, --checkpoint-storage (or --settings)"),
    (["--job-name", "c", "--job-uid", "u", "--entrypoint", "m:f", "--checkpoint-storage", "x",
      "--args-json", "[1]"], "--args-json must be a JSON object"),
])
def test_settings_the_driver_cannot_run_exit_2_in_one_line(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *argv]) == ExitCode.BAD_CONFIG
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
