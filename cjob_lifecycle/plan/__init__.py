"""The decision about one CheckpointedJob: an observation in, actions and the new
status out. The operator runs it against the Kubernetes API and ``cjob run`` against
local driver processes and a file store, so both follow this one lifecycle.

``plan`` is pure and is called on every reconciliation pass. It never sleeps: a wait
(restart backoff, a final checkpoint before suspending, a previous driver still
shutting down) becomes a ``RequeueAfter``. The status is rebuilt on every pass from the
previous status and what is observed, so a lost status update only delays a step.

Lifecycle of a job (``status.phase``)::

    (new) --start--> Pending --driver runs--> Running --exit 0--> Succeeded
                        |                        |
                        +---- failure -----------+--> Restarting --backoff--> Pending ...
                        |                                  |
                        +-- permanent / limit / Never -----+--> Failed
    suspend: Running --final checkpoint--> Suspended --resume--> Pending (latest checkpoint)
    spec change while Pending/Running: Restarting (Upgrading) --old driver gone--> Pending

With a ready standby (``spec.standby``), Restarting passes without the backoff: the
standby is promoted in the same pass. It may also end the attempt first: its report
that the driver is gone (``cjob_spec.driver_beacon``) arrives before the kubelet's.

Each attempt n runs in pod ``<job>-attempt-<n>``. Before creating it, the checkpoint
store's fence is advanced to n, so older attempts (a zombie on a lost node) can no
longer write. A new attempt restores from ``latest`` when the store holds a
checkpoint, otherwise from ``spec.restore.from``. It runs ``spec.image``, or the
operator's runtime image when the spec names none; with neither, the job is Failed
(reason ``NoImage``) until the spec or the operator provides one.

The package has one module per part of the decision, each writing into one
:class:`~cjob_lifecycle.plan.draft.Draft`: ``planner`` (the pass, its parts in order),
``phases`` (the state machine), ``attempts`` (starting one, the end of one),
``suspension``, ``standby``, ``store`` (guards on the checkpoint store), ``failures``
(how an attempt ended), ``pods`` (which drivers block, deleting them), ``deletion``
(the finalizer path), ``conditions`` and ``invalid_spec``.
"""

from cjob_lifecycle.plan.draft import Plan, PlanSettings
from cjob_lifecycle.plan.invalid_spec import plan_invalid_spec
from cjob_lifecycle.plan.planner import plan
from cjob_lifecycle.plan.rollback import effective_job

__all__ = ["Plan", "PlanSettings", "effective_job", "plan", "plan_invalid_spec"]
