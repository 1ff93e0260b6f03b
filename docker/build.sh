#!/usr/bin/env bash
# Build the checkpointed-jobs images; a thin wrapper of `python -m e2e.images` (which
# needs only Python 3.11's standard library). See docker/README.md.
#
#   docker/build.sh                  base + operator + runtime with buildah -> archives
#   docker/build.sh plan             what would be built, and where the archives go
#   docker/build.sh base --engine docker    the base image for `docker build` (root)
#   docker/build.sh --engine docker  base + both images into the local Docker engine
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  if [[ -x "${repo}/.venv/bin/python" ]]; then
    python="${repo}/.venv/bin/python"
  else
    python=python3
  fi
fi
cd "${repo}"
exec "${python}" -m e2e.images "$@"
