"""``kubectl_complete-cjob``: shell completion of ``kubectl cjob``.

kubectl (1.26 and later) completes a plugin's words by running
``kubectl_complete-<plugin>`` from ``PATH`` with the words typed after the plugin's
name, the last one being the word under the cursor (empty for a new word). It expects
cobra's protocol: one candidate per line, then ``:<directive>``; directive 4 asks the
shell not to fall back to file names. Commands, flags, ``-o`` formats and job names
(listed from the cluster the typed ``-n``/``--context``/``--kubeconfig`` name) are
completed; when the cluster cannot be reached, no job names are offered and nothing
is printed on standard error, which would garble the user's prompt.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from cjob.views import OUTPUTS

NO_FILE_COMPLETION = ":4"
"""cobra's ShellCompDirectiveNoFileComp."""
CONNECTION_FLAGS = ("-n", "--namespace", "--context", "--kubeconfig")
FLAGS_WITH_VALUES = frozenset(CONNECTION_FLAGS) | {
    "-o", "--output", "--timeout", "--name", "--checkpoint", "--tail", "--events", "--from",
    "--operator", "--state", "--limit"}
COMMAND_FLAGS = {
    "list": ("-A", "--all-namespaces", "-o", "--output"),
    "status": ("-o", "--output", "--events"),
    "checkpoints": ("-o", "--output"),
    "checkpoint": ("-o", "--output", "--timeout", "--no-wait"),
    "snapshot": ("-o", "--output", "--name", "--checkpoint", "--timeout", "--no-wait"),
    "suspend": ("--timeout", "--no-wait"),
    "resume": ("--timeout", "--no-wait"),
    "scale": ("--timeout", "--no-wait"),
    "restore": ("--from", "--timeout", "--no-wait"),
    "state": ("-o", "--output", "--checkpoint", "--operator", "--state", "--limit",
              "--timeout"),
    "logs": ("-f", "--follow", "--tail"),
}
"""Each command's own flags (the connection flags are every command's)."""


def candidates(words: Sequence[str], *,
               job_names: Callable[..., list[str]] | None = None) -> list[str]:
    """The completions of the last of ``words`` (the words after ``cjob``).

    ``job_names``, a callable ``(namespace, context, kubeconfig) -> list[str]``, lists the
    jobs; the default asks the cluster."""
    *typed, current = list(words) or [""]
    connection: dict[str, str | None] = dict.fromkeys(("namespace", "context", "kubeconfig"))
    positional: list[str] = []
    previous: str | None = None
    for word in typed:
        if previous is not None and previous in FLAGS_WITH_VALUES:
            key = {"-n": "namespace", "--namespace": "namespace", "--context": "context",
                   "--kubeconfig": "kubeconfig"}.get(previous)
            if key is not None:
                connection[key] = word
            previous = None
            continue
        if "=" in word and word.startswith("--"):
            flag, _, value = word.partition("=")
            if flag in ("--namespace", "--context", "--kubeconfig"):
                connection[flag[2:]] = value
        elif not word.startswith("-"):
            positional.append(word)
        previous = word
    if previous in ("-o", "--output"):
        return [o for o in OUTPUTS if o.startswith(current)]
    if previous in FLAGS_WITH_VALUES and previous not in ("-n", "--namespace"):
        return []
    if previous in ("-n", "--namespace"):
        return []  # namespaces: kubectl's own completion is not reachable from here
    command = positional[0] if positional else None
    if current.startswith("-"):
        flags = COMMAND_FLAGS.get(command or "", ()) + CONNECTION_FLAGS
        return sorted(f for f in flags if f.startswith(current))
    if command is None:
        return [c for c in COMMAND_FLAGS if c.startswith(current)]
    if command in COMMAND_FLAGS and command != "list" and len(positional) == 1:
        lister = job_names or _cluster_job_names
        try:
            names: list[str] = lister(**connection)
        except Exception:  # a prompt is no place for a traceback
            return []
        return sorted(n for n in names if n.startswith(current))
    return []


def _cluster_job_names(*, namespace: str | None, context: str | None,
                       kubeconfig: str | None) -> list[str]:
    from cjob.cluster_access import ClusterAccess

    access = ClusterAccess(kubeconfig=kubeconfig, context=context, namespace=namespace)
    return [job["metadata"]["name"] for job in access.jobs(all_namespaces=False)]


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    for candidate in candidates(words):
        print(candidate)
    print(NO_FILE_COMPLETION)
    return 0


if __name__ == "__main__":
    sys.exit(main())
