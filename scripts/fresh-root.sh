#!/usr/bin/env bash
# Run commands in a fresh Debian root, as a newcomer's machine would run them: Debian
# bookworm with Python 3.11, Java 17, make and git from Debian, and the host's Go
# toolchain (Debian's Go is older than the one the pinned Kubernetes needs), nothing
# else. It shows that the README's commands install everything else themselves.
#
# Usage (as root, with debootstrap):
#   scripts/fresh-root.sh ROOT [COMMAND...]
#
# ROOT is created on first use (debootstrap, a few minutes) and reused afterwards; the
# repository's committed HEAD is cloned into ROOT/src/checkpointed-jobs afresh each
# time, and COMMAND (default: an interactive shell) runs there. The host's own
# certificate authorities (/usr/local/share/ca-certificates) and pip configuration are
# copied in: they belong to the machine's network, not to the project.
# `scripts/fresh-root.sh ROOT --remove` unmounts and deletes ROOT.
set -euo pipefail

die() {
  echo "fresh-root: error: $*" >&2
  exit 1
}

[[ $# -ge 1 ]] || die "usage: $0 ROOT [COMMAND...|--remove]"
root="$(realpath -m "$1")"
shift
[[ "$(id -u)" -eq 0 ]] || die "debootstrap and chroot need root"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

unmount_all() {
  local m
  for m in $(awk -v r="${root}/" 'index($2 "/", r) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount "${m}" 2>/dev/null || umount -l "${m}" || true
  done
}

if [[ "${1:-}" == "--remove" ]]; then
  unmount_all
  [[ -z "$(awk -v r="${root}/" 'index($2 "/", r) == 1' /proc/mounts)" ]] \
    || die "still mounted below ${root}; not deleting"
  rm -rf "${root}"
  exit 0
fi

PATH="${PATH}:/usr/sbin:/sbin"
if [[ ! -e "${root}/.fresh-root-ready" ]]; then
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  echo "fresh-root: debootstrap bookworm into ${root}"
  rm -rf "${root}"
  debootstrap --variant=minbase \
    --include=python3,openjdk-17-jre-headless,make,git,ca-certificates \
    bookworm "${root}" >"${root}.debootstrap.log" 2>&1 \
    || die "debootstrap failed; see ${root}.debootstrap.log"
  # What Debian's installer writes and debootstrap does not: Spark binds "localhost".
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
    >"${root}/etc/hosts"
  touch "${root}/.fresh-root-ready"
fi

# The machine's network: its certificate authorities and pip's settings.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "${root}/usr/local/share/ca-certificates/"
fi
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "${root}/etc/pip.conf"
cp /etc/resolv.conf "${root}/etc/resolv.conf"
# Go, as a newcomer installs it (into /usr/local/go).
goroot="$(go env GOROOT 2>/dev/null)" || die "Go is not installed on the host"
rm -rf "${root}/usr/local/go"
cp -a "${goroot}" "${root}/usr/local/go"

rm -rf "${root}/src/checkpointed-jobs"
mkdir -p "${root}/src"
git clone -q "${repo}" "${root}/src/checkpointed-jobs"

trap unmount_all EXIT
mount -t proc proc "${root}/proc"
mount -t sysfs sysfs "${root}/sys"
mount --bind /dev "${root}/dev"
mount --bind /dev/pts "${root}/dev/pts"
mount -t tmpfs tmpfs "${root}/tmp"
[[ -d /sys/fs/cgroup ]] && mount --rbind /sys/fs/cgroup "${root}/sys/fs/cgroup"

chroot "${root}" /usr/sbin/update-ca-certificates >/dev/null
[[ $# -gt 0 ]] || set -- bash -l
chroot "${root}" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
  PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'cd /src/checkpointed-jobs && exec "$@"' bash "$@"
