"""The CheckpointedJob operator.

Pure parts (no Kubernetes API calls): ``observed`` (typed snapshot of what the
operator sees), ``actions`` (what it may do), ``plan`` (the decision: observation in,
actions and the new status out), ``builders`` (manifests) and ``config``.

Live parts: ``reconcile`` (one pass: observe, plan, execute, write the status),
``loops`` (one asyncio loop per job, woken by events), ``api`` (the only module that
calls the Kubernetes API), ``handlers`` and ``startup`` (kopf wiring), ``metrics``,
``options`` and ``__main__`` (``python -m cjob_operator``).
"""
