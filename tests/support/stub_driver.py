"""A stand-in for ``python -m job_runtime run`` whose fate is scripted, for lifecycle tests.

It takes the runtime's arguments (the ``--settings`` document), checks that the store is fenced to its attempt (as
the real driver's store would refuse it otherwise), runs for ``STUB_SECONDS`` and then
ends as ``STUB_EXITS`` says for its attempt: a comma-separated list of exit codes, the
last one repeated for later attempts; ``137`` is a real SIGKILL of itself.

With ``--standby FILE`` it is a standby driver: it says it is ready at once, waits
for its promotion and then checks the fence against the promoted attempt, as a
driver started for that attempt would.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from cjob_spec.exit_codes import ExitCode
from cjob_spec.runtime_settings import RuntimeSettings
from cjob_spec.standby_signal import (
    SUPERVISOR_PID_ENV,
    StandbyReady,
    read_promotion,
    ready_path,
    write_signal,
)

FENCE_MISMATCH = ExitCode.FENCED


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settings", required=True)
    parser.add_argument("--standby", default=None)
    ns, _ = parser.parse_known_args()
    settings = RuntimeSettings.decode(ns.settings)
    attempt = settings.attempt
    if ns.standby is not None:
        if os.environ.get(SUPERVISOR_PID_ENV) != str(os.getppid()):
            return ExitCode.BAD_CONFIG  # the runner must name itself to its standby
        attempt = wait_for_promotion(ns.standby)
    store = settings.store.removeprefix("file:")
    with open(os.path.join(store, "attempt")) as handle:
        if int(handle.read()) != attempt:
            return FENCE_MISMATCH
    time.sleep(float(os.environ.get("STUB_SECONDS", "2")))
    exits = [int(code) for code in os.environ["STUB_EXITS"].split(",")]
    code = exits[min(attempt, len(exits)) - 1]
    if code == 137:
        os.kill(os.getpid(), signal.SIGKILL)
    return code


def wait_for_promotion(path: str) -> int:
    write_signal(ready_path(path), StandbyReady(pid=os.getpid(), ready_at=time.time()))
    while (promotion := read_promotion(path)) is None:
        time.sleep(0.01)
    return promotion.attempt


if __name__ == "__main__":
    sys.exit(main())
