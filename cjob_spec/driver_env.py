"""The driver's environment, for the operator's driver pod and ``cjob run`` alike.

Both supervisors start the same ``python -m job_runtime run``; what reaches the driver
through its environment must not depend on which one started it. So this one pure
function names every variable, and each supervisor only renders it: the operator as a
pod's ``env`` (secret references become ``secretKeyRef``), the embedded runner as a
process environment (where no Secret exists, so credentials come from its own).

``spec.checkpoint.s3`` lands in the standard AWS variables on purpose: boto3 and every
AWS SDK read them, so the job's own ``s3://`` sources and sinks use the same endpoint
and region as its checkpoints and code archives unless they are told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from cjob_spec.model import CheckpointedJob

CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
"""The keys of ``spec.checkpoint.s3.credentialsSecret``, also the variables' names."""


@dataclass(frozen=True, kw_only=True)
class SecretKeyRef:
    """A value held in a key of a Secret in the job's namespace."""

    secret: str
    key: str


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    """One variable of the driver: a literal ``value`` or a ``secret`` reference."""

    name: str
    value: str | None = None
    secret: SecretKeyRef | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.secret is None):
            raise ValueError(f"{self.name}: exactly one of value and secret is needed")


def driver_env(job: CheckpointedJob) -> tuple[EnvVar, ...]:
    """The variables the spec gives the driver, in a stable order."""
    env = [EnvVar(name="PYTHONUNBUFFERED", value="1")]
    s3 = job.spec.checkpoint.s3
    if s3 is not None:
        if s3.credentials_secret:
            env += [EnvVar(name=key, secret=SecretKeyRef(secret=s3.credentials_secret, key=key))
                    for key in CREDENTIAL_KEYS]
        if s3.endpoint:
            env.append(EnvVar(name="AWS_ENDPOINT_URL", value=s3.endpoint))
        if s3.region:
            env.append(EnvVar(name="AWS_REGION", value=s3.region))
            env.append(EnvVar(name="AWS_DEFAULT_REGION", value=s3.region))
    return tuple(env)
