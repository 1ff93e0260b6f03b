"""Build the krew archive of ``kubectl cjob`` and its manifest.

The archive holds the launcher ``kubectl-cjob`` and, in ``lib/``, the project's Python
packages with the plugin's libraries (the ``kubectl`` extra), installed by pip for the
Python running this script: krew unpacks it, links the launcher onto ``PATH``, and the
launcher runs the plugin with the machine's ``python3`` on those libraries alone. The
manifest is ``krew/cjob.yaml`` with the version, the archive's address and checksum
filled in.

    python scripts/krew_package.py --uri URI [--out dist]

prints the archive's and the manifest's paths.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "krew" / "cjob.yaml"

LAUNCHER = '''#!/usr/bin/env python3
"""kubectl cjob, as krew installs it: the plugin runs on the libraries beside it."""
import os
import sys

if sys.version_info < (3, 11):
    sys.exit("kubectl cjob needs Python 3.11 or newer as python3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib"))
from cjob.kubectl import main  # noqa: E402

sys.exit(main())
'''


class PackagingError(RuntimeError):
    """pip could not install the plugin's libraries."""


def project_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def build_archive(*, out: Path, version: str) -> Path:
    """``out/kubectl-cjob-v<version>-linux-amd64.tar.gz``."""
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"kubectl-cjob-v{version}-linux-amd64.tar.gz"
    with tempfile.TemporaryDirectory(prefix="krew-") as scratch:
        root = Path(scratch) / "kubectl-cjob"
        lib = root / "lib"
        installed = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
             "--disable-pip-version-check", "--target", str(lib), f"{REPO}[kubectl]"],
            capture_output=True, text=True, check=False, cwd=scratch)
        if installed.returncode != 0:
            raise PackagingError(f"pip could not install the plugin's libraries:\n"
                                 f"{installed.stdout}{installed.stderr}")
        shutil.rmtree(lib / "bin", ignore_errors=True)  # console scripts of this Python
        launcher = root / "kubectl-cjob"
        launcher.write_text(LAUNCHER)
        launcher.chmod(0o755)
        with tarfile.open(archive, "w:gz") as tar:
            for path in sorted(root.iterdir()):
                tar.add(path, arcname=path.name)
    return archive


def write_manifest(*, archive: Path, uri: str, version: str, out: Path) -> Path:
    checksum = hashlib.sha256(archive.read_bytes()).hexdigest()
    text = (TEMPLATE.read_text().replace("{{version}}", f"v{version}")
            .replace("{{uri}}", uri).replace("{{sha256}}", checksum))
    manifest = out / "cjob.yaml"
    manifest.write_text(text)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="krew_package", description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", required=True,
                        help="where the archive will be downloaded from (https:// or file://)")
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    args = parser.parse_args(argv)
    version = project_version()
    try:
        archive = build_archive(out=args.out, version=version)
    except PackagingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    manifest = write_manifest(archive=archive, uri=args.uri, version=version, out=args.out)
    print(archive)
    print(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
