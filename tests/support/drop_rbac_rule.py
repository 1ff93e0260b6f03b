"""A Helm post-renderer that removes one verb from the chart's RBAC rules.

``helm install --post-renderer python --post-renderer-args drop_rbac_rule.py
--post-renderer-args pods:create ...`` installs the chart exactly as rendered, except
that every Role and ClusterRole rule on the resource loses the verb (a rule left with
no verb is dropped). The tests use it to install a chart that misses one permission
and check that the operator reports the refusal instead of failing silently.

Reads the rendered manifests on stdin and writes them to stdout, as helm expects.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

RBAC_KINDS = ("Role", "ClusterRole")


class BadRuleSpecError(Exception):
    """The rule to drop was not given as ``resource:verb``."""

    def __init__(self, *, text: str) -> None:
        super().__init__(f"expected RESOURCE:VERB (for example pods:create), got {text!r}")
        self.text = text


def parse_rule_spec(text: str) -> tuple[str, str]:
    resource, _, verb = text.partition(":")
    if not resource or not verb:
        raise BadRuleSpecError(text=text)
    return resource, verb


def without_verb(rule: dict[str, Any], *, resource: str, verb: str) -> list[dict[str, Any]]:
    """``rule`` with ``verb`` removed for ``resource`` (split off if it names others too)."""
    resources = list(rule.get("resources") or [])
    verbs = list(rule.get("verbs") or [])
    if resource not in resources or verb not in verbs:
        return [rule]
    kept: list[dict[str, Any]] = []
    others = [r for r in resources if r != resource]
    if others:
        kept.append({**rule, "resources": others})
    remaining = [v for v in verbs if v != verb]
    if remaining:
        kept.append({**rule, "resources": [resource], "verbs": remaining})
    return kept


def drop_verb(documents: list[Any], *, resource: str, verb: str) -> int:
    """Remove ``verb`` on ``resource`` from every Role and ClusterRole; returns how many
    rules changed."""
    changed = 0
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") not in RBAC_KINDS:
            continue
        rules: list[dict[str, Any]] = []
        for rule in doc.get("rules") or []:
            replaced = without_verb(rule, resource=resource, verb=verb)
            if replaced != [rule]:
                changed += 1
            rules.extend(replaced)
        doc["rules"] = rules
    return changed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: drop_rbac_rule.py RESOURCE:VERB < manifests", file=sys.stderr)
        return 2
    resource, verb = parse_rule_spec(argv[0])
    documents = [doc for doc in yaml.safe_load_all(sys.stdin.read()) if doc]
    if drop_verb(documents, resource=resource, verb=verb) == 0:
        print(f"no Role or ClusterRole rule grants {verb} on {resource}", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.safe_dump_all(documents, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
