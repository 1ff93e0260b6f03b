"""``python -m cjob_spec.schema DIRECTORY``: write every CRD of ours into DIRECTORY.

``make crds`` runs it for ``crds/`` and then copies the files into the chart; a file
that already holds its CRD is left untouched, so its modification time says when its
schema last changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cjob_spec.schema.crd import RESOURCES


def main(arguments: list[str]) -> int:
    if len(arguments) != 1 or not Path(arguments[0]).is_dir():
        print("usage: python -m cjob_spec.schema DIRECTORY (an existing directory)",
              file=sys.stderr)
        return 2
    for resource in RESOURCES:
        path = Path(arguments[0]) / resource.file_name
        text = resource.text()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
