"""The CheckpointedJob operator: the lifecycle's planner run against the Kubernetes API.

Pure parts (no Kubernetes API calls): ``observed`` (pods and the checkpoint ConfigMap
as the planner's observations), ``builders`` (manifests), ``cluster`` (what a pass
needs from the API, as a protocol) and ``config``. The decision itself is
:func:`cjob_lifecycle.plan.plan`, shared with the embedded runner.

One pass over a job: ``reconcile`` (observe, plan, execute, write the status, retry),
with ``read_cache`` (the last reading of each job and store) and ``executor`` (the
plan's actions against the API).

Live parts: ``loops`` (one asyncio loop per job, woken by events), ``api`` (the only
module that calls the Kubernetes API), ``handlers`` and ``startup`` (kopf wiring),
``metrics``, ``options`` and ``__main__`` (``python -m cjob_operator``).
"""
