"""A stand-in for ``python -m job_runtime run`` whose fate is scripted, for lifecycle tests.

It takes the runtime's arguments, checks that the store is fenced to its attempt (as
the real driver's store would refuse it otherwise), runs for ``STUB_SECONDS`` and then
ends as ``STUB_EXITS`` says for its attempt: a comma-separated list of exit codes, the
last one repeated for later attempts; ``137`` is a real SIGKILL of itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

FENCE_MISMATCH = 9


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--store", required=True)
    ns, _ = parser.parse_known_args()
    store = ns.store.removeprefix("file:")
    with open(os.path.join(store, "attempt")) as handle:
        if int(handle.read()) != ns.attempt:
            return FENCE_MISMATCH
    time.sleep(float(os.environ.get("STUB_SECONDS", "2")))
    exits = [int(code) for code in os.environ["STUB_EXITS"].split(",")]
    code = exits[min(ns.attempt, len(exits)) - 1]
    if code == 137:
        os.kill(os.getpid(), signal.SIGKILL)
    return code


if __name__ == "__main__":
    sys.exit(main())
