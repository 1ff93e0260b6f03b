"""The driver's logger: every line about the job's run goes out under one name.

Whichever role writes it (the phases, the standby's wait, the beacon, the status
file, the exit code), a reader of a driver's log filters on ``job_runtime.driver``.
"""

from __future__ import annotations

import logging

log = logging.getLogger("job_runtime.driver")
