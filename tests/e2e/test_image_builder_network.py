"""The image build leaves the host's network alone.

buildah's default network turns on ``net.ipv4.ip_forward`` and adds a ``cni-podman0``
bridge the first time a container runs. The Dockerfiles' RUN steps (the runtime's
installs Debian packages) use the host's network namespace instead, which changes
nothing on the host; the smoke checks run with no network at all.
"""

from __future__ import annotations

import stat
from pathlib import Path

from e2e.images import make_plan
from e2e.images.builder import Buildah, bud_args


def recording_buildah(tmp_path: Path) -> tuple[Buildah, Path]:
    """A Buildah whose executable only records its arguments, one a line."""
    record = tmp_path / "argv"
    script = tmp_path / "buildah"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    buildah = Buildah(executable=str(script), root=tmp_path / "root",
                      runroot=tmp_path / "run", driver="vfs")
    return buildah, record


def test_the_dockerfiles_run_steps_use_the_hosts_network_not_buildahs_bridge(
        tmp_path: Path) -> None:
    plan = make_plan(cache=tmp_path)
    for image in plan.images:
        for wheelhouse in (None, tmp_path / "wheels"):
            args = bud_args(image, plan=plan, wheelhouse=wheelhouse)
            at = args.index("--network")
            assert args[at + 1] == "host", args


def test_a_smoke_check_runs_its_command_without_a_network(tmp_path: Path) -> None:
    buildah, record = recording_buildah(tmp_path)
    buildah.run_in("c1", "id", "-u")
    argv = record.read_text().splitlines()
    run = argv.index("run")
    assert argv[run:] == ["run", "--network", "none", "c1", "--", "id", "-u"]
