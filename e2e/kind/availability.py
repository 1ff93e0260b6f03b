"""Whether Docker and kind can run here, and why not when they cannot."""

from __future__ import annotations

import shutil
import subprocess


def kind_unavailable_reason() -> str | None:
    """``None`` when ``docker`` and ``kind`` are usable, else a sentence saying why not.

    A ``docker`` command without a reachable engine is the common case on machines
    without Docker, so the engine is asked (``docker info``) rather than trusting PATH;
    the engine is checked before kind because it is the harder thing to provide.
    """
    if shutil.which("docker") is None:
        return "docker is not installed (kind needs a Docker engine)"
    try:
        proc = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"the Docker engine is not reachable: {detail[0]}"
    if shutil.which("kind") is None:
        return "kind is not installed (go install sigs.k8s.io/kind@<version>)"
    return None
