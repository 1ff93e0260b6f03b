"""``python -m e2e.images``: build the project's images (see docker/README.md).

python -m e2e.images [build] [--force]   base, wheelhouse, both images -> archives
python -m e2e.images base                the base image only
python -m e2e.images plan                references, keys and archives; builds nothing
python -m e2e.images base-tag            the base reference the Dockerfiles must name
python -m e2e.images import --ctr CTR --address SOCKET [--namespace k8s.io]
python -m e2e.images build --engine docker   the same with a Docker engine, no archives
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from e2e.images.builder import (
    ImageBuildError,
    build_base,
    build_images,
    build_with_docker,
)
from e2e.images.containerd import ImageImportError, import_images
from e2e.images.plan import make_plan, stale_base_defaults


def _say(message: str) -> None:
    print(message, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.images",
        description="Build the checkpointed-jobs operator and runtime images.",
    )
    parser.add_argument(
        "command", nargs="?", default="build",
        choices=("build", "base", "plan", "base-tag", "import"),
    )  # fmt: skip
    parser.add_argument(
        "--engine", choices=("buildah", "docker"), default="buildah",
        help="buildah (default: archives in the cache) or a local Docker engine",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="rebuild the images")
    parser.add_argument("--cache-dir", type=Path, help="cache root (default CJOB_CACHE_DIR)")
    parser.add_argument("--ctr", type=Path, help="import: the ctr program")
    parser.add_argument("--address", type=Path, help="import: containerd's socket")
    parser.add_argument("--namespace", default="k8s.io", help="import: containerd namespace")
    parser.add_argument("--snapshotter", help="import: snapshotter of the CRI plugin")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "plan":
            plan = make_plan(cache=args.cache_dir)
            print(f"base      {plan.base_reference}")
            for name, default in stale_base_defaults(plan).items():
                print(f"          docker/{name}.Dockerfile names {default} instead")
            for image in plan.images:
                state = "cached" if image.archive.is_file() else "to build"
                print(f"{image.name:9} {image.tag}  {image.archive}  ({state})")
            return 0
        if args.command == "base-tag":
            print(make_plan(cache=args.cache_dir).base_reference)
            return 0
        if args.engine == "docker":
            if args.command == "import":
                raise SystemExit("import works on buildah archives: drop --engine docker")
            build_with_docker(log=_say, cache=args.cache_dir, base_only=args.command == "base")
            return 0
        if args.command == "base":
            build_base(log=_say, cache=args.cache_dir)
            return 0
        if args.command == "import" and (args.ctr is None or args.address is None):
            raise SystemExit("import needs --ctr and --address")
        images = build_images(log=_say, cache=args.cache_dir, force=args.force)
        if args.command == "import":
            assert args.ctr is not None and args.address is not None
            import_images(
                ctr=args.ctr, address=args.address, images=images,
                namespace=args.namespace, snapshotter=args.snapshotter, log=_say,
            )  # fmt: skip
            return 0
        for built in images.all():
            size = built.archive.stat().st_size / 1e6
            print(f"{built.name:9} {built.tag}  {built.archive}  ({size:.0f} MB)")
        return 0
    except (ImageBuildError, ImageImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
