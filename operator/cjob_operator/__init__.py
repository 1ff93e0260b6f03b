"""The CheckpointedJob operator.

Pure parts (no Kubernetes API calls): ``observed`` (typed snapshot of what the
operator sees), ``actions`` (what it may do), ``plan`` (the decision: observation in,
actions and the new status out), ``builders`` (manifests) and ``config``.
"""
