"""``python -m cjob_spec.schema PATH...``: write the CheckpointedJob CRD to each PATH.

``make crds`` runs it for ``crds/checkpointedjob.yaml`` and the chart's copy; a file
that already holds the CRD is left untouched, so its modification time says when the
schema last changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cjob_spec.schema.crd import crd_text


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: python -m cjob_spec.schema PATH...", file=sys.stderr)
        return 2
    text = crd_text()
    for name in paths:
        path = Path(name)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
