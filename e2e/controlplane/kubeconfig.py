"""Write kubeconfig files for the local control plane's identities."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(
    *,
    path: Path,
    server: str,
    ca_file: Path,
    user: str,
    client_cert: Path | None = None,
    client_key: Path | None = None,
    token: str | None = None,
    token_file: Path | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a single-context kubeconfig and return its path.

    Paths are absolute so the file works from any working directory. When both a
    token and a token file are given, clients that re-read the file (kubectl,
    client-go) pick up refreshed tokens while others use the inline one.
    """
    user_entry: dict[str, str] = {}
    if client_cert is not None and client_key is not None:
        user_entry["client-certificate"] = str(client_cert.resolve())
        user_entry["client-key"] = str(client_key.resolve())
    if token is not None:
        user_entry["token"] = token
    if token_file is not None:
        user_entry["tokenFile"] = str(token_file.resolve())
    context: dict[str, str] = {"cluster": "local", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority": str(ca_file.resolve())},
            }
        ],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": "local", "context": context}],
        "current-context": "local",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(document, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
