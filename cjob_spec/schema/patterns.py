"""Regular expressions that both the CRD and the parser check values with.

Each is written once, in the syntax RE2 (the API server's ``pattern`` and CEL
``matches``) and Python's ``re`` read alike: character classes end with a literal
``-`` instead of escaping it, and there are no look-arounds.
"""

from __future__ import annotations

JOB_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
"""A CheckpointedJob's name: a DNS label that starts with a letter (at most
``cjob_spec.names.MAX_JOB_NAME_LENGTH`` characters)."""
ENTRYPOINT = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
"""``module:function`` of the job's ``build(p: Pipeline)`` function."""
URL_SCHEME = r"^[A-Za-z][A-Za-z0-9+.-]*://"
"""The start of a URL: a ``pythonPath`` entry that has one must be an S3 archive."""
S3_CODE_ARCHIVE = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/\S+[.]zip$"
"""An ``s3://`` entry of ``spec.job.pythonPath``: one zip archive, whose top level is
what goes on ``sys.path`` (modules and packages)."""
FILE_STORAGE = r"^file:///\S*$"
S3_STORAGE = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?$"
S3_ENDPOINT = r"^https?://[^\s/]+(/\S*)?$"
"""An S3 endpoint: http(s), a host, an optional path (credentials are refused apart)."""
ENDPOINT_CREDENTIALS = r"^https?://[^/]*@"
"""An endpoint with ``user:password@`` in it, which must never be echoed back."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A Kubernetes object name such as a Secret's (at most 253 characters)."""
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A CheckpointedJobSnapshot's name (at most 253 characters)."""
LOCAL_MASTER = r"^local\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\]$"
"""``local[N]``, ``local[*]`` or ``local[N,F]``: Spark inside the driver's process."""
MEMORY_QUANTITY = (r"^[0-9]+(\.[0-9]+)?"
                   r"(Ki|Mi|Gi|Ti|Pi|Ei|K|M|G|T|P|E|b|k|m|g|t|p|kb|mb|gb|tb|pb)?$")
"""A Kubernetes (``2Gi``) or Spark (``2g``) memory quantity."""
RESTORE_FROM = r"^(latest|[0-9]+|file:///\S*|s3://\S+)$"
NO_SPACES = r"^\S+$"
