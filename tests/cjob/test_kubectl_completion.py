"""``kubectl_complete-cjob``: commands, flags, formats and job names, in cobra's protocol,
and never an error on the user's prompt."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from cjob.completion import candidates, main


def names(**connection: Any) -> list[str]:
    names.asked = connection  # type: ignore[attr-defined]
    return ["clicks", "orders", "clicks-v2"]


def test_the_first_word_completes_to_commands() -> None:
    assert candidates(["s"]) == ["status", "snapshot", "suspend", "scale", "state"]
    assert "checkpoints" in candidates([""]) and "logs" in candidates([""])


def test_a_job_name_completes_from_the_namespace_and_context_typed_so_far() -> None:
    found = candidates(["-n", "jobs", "status", "--context", "lab", "cl"], job_names=names)
    assert found == ["clicks", "clicks-v2"]
    assert names.asked == {"namespace": "jobs", "context": "lab",  # type: ignore[attr-defined]
                           "kubeconfig": None}
    assert candidates(["logs", "--kubeconfig=/k", ""], job_names=names) == [
        "clicks", "clicks-v2", "orders"]
    assert names.asked["kubeconfig"] == "/k"  # type: ignore[attr-defined]


def test_list_takes_no_name_and_a_second_name_is_not_completed() -> None:
    assert candidates(["list", ""], job_names=names) == []
    assert candidates(["status", "clicks", ""], job_names=names) == []


def test_flags_and_output_formats_complete_per_command() -> None:
    assert candidates(["snapshot", "clicks", "--n"]) == ["--name", "--namespace",
                                                         "--no-wait"]
    assert candidates(["status", "clicks", "-o", "y"]) == ["yaml"]
    assert candidates(["checkpoint", "clicks", "--timeout", ""]) == []


def test_an_unreachable_cluster_offers_no_names_and_prints_nothing_but_the_directive(
        capsys: Any) -> None:
    def unreachable(**_: Any) -> list[str]:
        raise OSError("connection refused")
    assert candidates(["status", ""], job_names=unreachable) == []
    main(["st"])
    assert capsys.readouterr().out.splitlines() == ["status", "state", ":4"]


def test_the_installed_entry_point_speaks_cobras_protocol() -> None:
    done = subprocess.run([sys.executable, "-m", "cjob.completion", "chec"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["checkpoints", "checkpoint", ":4"]
    assert done.stderr == ""
