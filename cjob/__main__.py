import sys

from cjob.cli import main

sys.exit(main())
