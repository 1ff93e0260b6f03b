#!/usr/bin/env bash
# The Debian packages the project needs on the host, checked before anything long runs.
#
# Usage:
#   scripts/host-packages.sh [GROUP...]   install what is missing (as root), or name it
#                                         in one line and exit 1 (not root)
#   scripts/host-packages.sh --list [GROUP...]   print the missing packages, one a line
#
# Groups (default: all of them):
#   run    what `make run` needs: a JVM for Spark, Python's venv module
#   test   what `make test` and `make cluster` add: runc, the CNI plugins, iptables and
#          conntrack for the real node; debootstrap and buildah for the images; Maven
#          for the Kafka broker's jars; openssl for the control plane's certificates;
#          PostgreSQL for the postgres tier's server (any major: the newest is used);
#          docker.io for the kind scenarios' own Docker engine (its system service is
#          never started: see below).
#          Go itself is a prerequisite, not a package: Debian's is older than the
#          version the pinned Kubernetes needs.
#
# `make run`, `make test`, `make cluster` and CI's `.ci/run` all call this script, so a
# fresh machine and CI install the same packages the same way.
set -euo pipefail

# package|how to tell it is there (an executable on PATH, or an absolute path)
run_packages=(
  "openjdk-17-jre-headless|java"
  "python3-venv|@venv"
)
test_packages=(
  "runc|/usr/sbin/runc"
  "containernetworking-plugins|/usr/lib/cni/bridge"
  "iptables|iptables"
  "conntrack|conntrack"
  "debootstrap|debootstrap"
  "buildah|buildah"
  "maven|mvn"
  "openssl|openssl"
  "postgresql|@postgres"
  "docker.io|/usr/sbin/dockerd"
)

python="${PYTHON:-python3}"

present() { # check
  local check="$1"
  case "${check}" in
    @venv)
      # Debian's python3 lacks ensurepip without python3-venv; a Python built
      # elsewhere (pyenv, the official installers) has it.
      "${python}" -c 'import ensurepip, venv' >/dev/null 2>&1
      ;;
    @postgres)
      # Debian's postgresql-<major> keeps its programs off PATH, one folder a major.
      local program
      for program in /usr/lib/postgresql/*/bin/postgres; do
        [[ -x "${program}" ]] && return 0
      done
      return 1
      ;;
    /*) [[ -e "${check}" ]] ;;
    *) PATH="${PATH}:/usr/sbin:/sbin" command -v "${check}" >/dev/null 2>&1 ;;
  esac
}

list_only=0
groups=()
for arg in "$@"; do
  case "${arg}" in
    --list) list_only=1 ;;
    run | test) groups+=("${arg}") ;;
    *)
      echo "host-packages: unknown argument '${arg}' (groups: run, test; option: --list)" >&2
      exit 2
      ;;
  esac
done
[[ ${#groups[@]} -gt 0 ]] || groups=(run test)

wanted=()
for group in "${groups[@]}"; do
  case "${group}" in
    run) wanted+=("${run_packages[@]}") ;;
    test) wanted+=("${test_packages[@]}") ;;
  esac
done

missing=()
for entry in "${wanted[@]}"; do
  package="${entry%%|*}"
  present "${entry#*|}" || missing+=("${package}")
done

if [[ ${list_only} -eq 1 ]]; then
  [[ ${#missing[@]} -eq 0 ]] || printf '%s\n' "${missing[@]}"
  exit 0
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" -ne 0 ]]; then
  echo "error: missing host packages: ${missing[*]}; install them as root: apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
command -v apt-get >/dev/null || {
  echo "error: missing host packages: ${missing[*]}; this is not a Debian-based system, install their equivalents by hand" >&2
  exit 1
}
echo "installing host packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The tests start their own servers (PostgreSQL, a private dockerd); a package must not
# start its system service. Debian's policy-rc.d hook says so while apt runs, and goes
# again after, unless the host had one of its own.
policy=/usr/sbin/policy-rc.d
if [[ ! -e "${policy}" ]]; then
  printf '#!/bin/sh\n# no service starts while host packages install\nexit 101\n' >"${policy}"
  chmod 755 "${policy}"
  trap 'rm -f "${policy}"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
still=()
for entry in "${wanted[@]}"; do
  present "${entry#*|}" || still+=("${entry%%|*}")
done
if [[ ${#still[@]} -gt 0 ]]; then
  echo "error: installed, but still not found: ${still[*]}" >&2
  exit 1
fi
