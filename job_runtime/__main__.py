"""Entry point of ``python -m job_runtime``."""

import sys

from job_runtime.cli import main

sys.exit(main())
