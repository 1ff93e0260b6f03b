pytest_plugins = ["e2e.s3", "e2e.controlplane.pytest_plugin", "e2e.realnode.pytest_plugin"]
