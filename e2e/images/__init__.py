"""Container images of checkpointed-jobs, built without a Docker engine.

``build_images`` builds ``docker/operator.Dockerfile`` and ``docker/runtime.Dockerfile``
with buildah on a base made from Debian packages (``docker/base/``) and returns their
docker-archive files, cached under ``~/.cache/checkpointed-jobs/images/`` by a hash of
every input; ``import_images`` loads them into containerd. ``python -m e2e.images``
is the command line (``docker/build.sh`` wraps it). See docker/README.md.

This package uses the standard library only, so a machine without the project's
virtualenv can run it.
"""

from e2e.images.builder import (
    BuiltImages,
    ImageArchive,
    ImageBuildError,
    MissingToolError,
    build_base,
    build_images,
    build_with_docker,
)
from e2e.images.containerd import ImageImportError, import_archive, import_images
from e2e.images.plan import BuildPlan, make_plan

__all__ = [
    "BuildPlan",
    "BuiltImages",
    "ImageArchive",
    "ImageBuildError",
    "ImageImportError",
    "MissingToolError",
    "build_base",
    "build_images",
    "build_with_docker",
    "import_archive",
    "import_images",
    "make_plan",
]
