"""What a driver or standby pod tells its runtime: the ``--settings`` document of its
container's arguments, decoded (:mod:`cjob_spec.runtime_settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cjob_spec.runtime_settings import RuntimeSettings


def runtime_settings_of(pod: Mapping[str, Any]) -> RuntimeSettings:
    args = list(pod["spec"]["containers"][0]["args"])
    return RuntimeSettings.decode(args[args.index("--settings") + 1])
