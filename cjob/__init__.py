"""The ``cjob`` command line and the embedded local runner."""
