#!/usr/bin/env bash
# Build the root filesystem of checkpointed-jobs/base as a tar archive, from Debian
# packages only: debootstrap's minbase variant of bookworm, the packages listed in
# packages.txt, the current security and point-release updates, and the documentation
# trimmed the way Debian's own slim images trim it.
#
# Usage (as root, on Linux with debootstrap installed):
#   docker/base/mkrootfs.sh OUTPUT.tar
#
# Environment:
#   CJOB_DEBIAN_MIRROR            Debian archive to install from (default: debootstrap's)
#   CJOB_DEBIAN_SECURITY_MIRROR   security archive ("none" leaves it out); default: the
#                                 mirror's URL with "-security" appended
#
# The tar archive is what `docker import` and the e2e.images builder turn into the
# image; nothing here knows about an image engine. Python in bookworm is 3.11, which
# the Dockerfiles rely on (/opt/venv/lib/python3.11/...).
set -euo pipefail

suite=bookworm
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() {
  echo "mkrootfs: error: $*" >&2
  exit 1
}

[[ $# -eq 1 ]] || die "usage: $0 OUTPUT.tar"
output="$1"
[[ "$(id -u)" -eq 0 ]] || die "debootstrap and chroot need root"
command -v debootstrap >/dev/null || die "debootstrap is not installed (Debian/Ubuntu: apt-get install debootstrap)"

packages="$(grep -v '^[[:space:]]*\(#\|$\)' "${here}/packages.txt" | tr -s '[:space:]' ',' | sed 's/,$//')"
[[ -n "${packages}" ]] || die "${here}/packages.txt lists no package"

output_dir="$(cd "$(dirname "${output}")" && pwd)"
work="$(mktemp -d "${output_dir}/.rootfs.XXXXXX")"
root="${work}/root"
mounts_below_root() {
  awk -v r="${root}/" 'index($2 "/", r) == 1 { print $2 }' /proc/mounts | sort -r
}
cleanup() {
  # debootstrap or an interrupted chroot step may leave /proc or /sys mounted inside;
  # deleting through a mount would delete the host's files.
  local m
  for m in $(mounts_below_root); do
    umount "${m}" 2>/dev/null || umount -l "${m}" || true
  done
  if [[ -n "$(mounts_below_root)" ]]; then
    echo "mkrootfs: still mounted below ${root}; left ${work} in place" >&2
    return
  fi
  rm -rf "${work}"
}
trap cleanup EXIT

echo "mkrootfs: debootstrap ${suite} (minbase + ${packages})"
mirror_args=()
[[ -n "${CJOB_DEBIAN_MIRROR:-}" ]] && mirror_args=("${CJOB_DEBIAN_MIRROR}")
if ! debootstrap --variant=minbase --include="${packages}" "${suite}" "${root}" \
  ${mirror_args[@]+"${mirror_args[@]}"} >"${work}/debootstrap.log" 2>&1; then
  tail -n 40 "${work}/debootstrap.log" >&2
  [[ -f "${root}/debootstrap/debootstrap.log" ]] && tail -n 40 "${root}/debootstrap/debootstrap.log" >&2
  die "debootstrap failed (is the Debian mirror reachable?)"
fi

# debootstrap wrote one "deb <mirror> bookworm main" line; replace it by the suite, its
# point-release updates and the security archive, as Debian's own images do.
mirror="$(awk '$1 == "deb" { print $2; exit }' "${root}/etc/apt/sources.list")"
[[ -n "${mirror}" ]] || die "debootstrap left no mirror in /etc/apt/sources.list"
security="${CJOB_DEBIAN_SECURITY_MIRROR:-${mirror%/}-security}"
rm -f "${root}/etc/apt/sources.list"
{
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "${mirror}" "${suite}" "${suite}"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  if [[ "${security}" != none ]]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "${security}" "${suite}"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
} >"${root}/etc/apt/sources.list.d/debian.sources"

# Leave documentation, manuals and translations out of every later install too (the
# copyright files stay): this is what makes the base "slim".
cat >"${root}/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
# No daemon may start while packages are installed in a build.
printf '#!/bin/sh\nexit 101\n' >"${root}/usr/sbin/policy-rc.d"
chmod 0755 "${root}/usr/sbin/policy-rc.d"

echo "mkrootfs: apt-get dist-upgrade (${suite}-updates, ${suite}-security)"
mount -t proc proc "${root}/proc"
if ! chroot "${root}" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  DEBIAN_FRONTEND=noninteractive LC_ALL=C sh -ec '
    apt-get update -qq
    apt-get dist-upgrade -y -qq -o Dpkg::Options::=--force-confold >/dev/null
    apt-get clean' >"${work}/upgrade.log" 2>&1; then
  tail -n 40 "${work}/upgrade.log" >&2
  die "apt-get dist-upgrade failed inside the new root filesystem"
fi
umount "${root}/proc"

echo "mkrootfs: trimming and packing"
# Nothing may still be mounted below the root before files are deleted there.
[[ -z "$(mounts_below_root)" ]] || die "something is still mounted below ${root}"
find "${root}/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
find "${root}/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "${root}"/usr/share/{man,info,groff,lintian,linda,locale}/*
rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin "${root}"/var/cache/debconf/*-old \
  "${root}"/var/log/* "${root}"/tmp/* "${root}"/var/tmp/* "${root}"/run/* "${root}"/dev/* \
  "${root}/debootstrap"
# The engine provides these per container; a machine id would be shared by every one.
rm -f "${root}/etc/hostname" "${root}/etc/resolv.conf"
: >"${root}/etc/machine-id"

tmp_output="${output}.partial"
tar --numeric-owner --xattrs --xattrs-include='security.capability' -C "${root}" -cf "${tmp_output}" .
mv -f "${tmp_output}" "${output}"
echo "mkrootfs: wrote ${output} ($(du -h "${output}" | cut -f1))"
