#!/usr/bin/env bash
# Build the local cluster toolset from Go modules, at the versions pinned in
# versions.env: the control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler), the tools (kubectl, helm, kwok) and the real node (kubelet,
# kube-proxy, containerd with its runc shim and ctr, CoreDNS, and the sandbox's pause
# program), versitygw, the S3 server the cluster quick start and the real-node
# scenarios run as a pod, what the kind scenarios add: kubeadm (in the node image
# built here) and kind itself, Prometheus with promtool, which evaluate the chart's
# alerts and dashboard, and krew, which installs the kubectl plugin's archive. Binaries are cached per component and version under
#   ${CJOB_CACHE_DIR:-~/.cache/checkpointed-jobs}/bin/<component>-<version>/
# and linked together in one "set" directory that --print-bin-dir prints.
#
# Usage:
#   e2e/controlplane/build.sh                  build what is missing, print the bin dir last
#   e2e/controlplane/build.sh --print-bin-dir  print the bin dir only (builds nothing)
#   e2e/controlplane/build.sh --check          exit 0 when every binary is cached
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the k8s.io/*
# staging modules with local folders), and neither can etcd's server module, so each
# is built from a small generated wrapper module that pins the published versions.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
source "${here}/versions.env"

cache_dir="${CJOB_CACHE_DIR:-${HOME}/.cache/checkpointed-jobs}"
bin_root="${cache_dir}/bin"
set_dir="${bin_root}/set-k8s-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-helm-${HELM_VERSION}-kwok-${KWOK_VERSION}-containerd-${CONTAINERD_VERSION}-coredns-${COREDNS_VERSION}-${COREDNS_BUILD}-pause-${PAUSE_VERSION}-versitygw-${VERSITYGW_VERSION}-kind-${KIND_VERSION}-prometheus-${PROMETHEUS_VERSION}-krew-${KREW_VERSION}"
work_root="${cache_dir}/build"
kube_components=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy kubeadm)
containerd_components=(containerd containerd-shim-runc-v2 ctr)

component_dir() { # component version
  echo "${bin_root}/$1-$2"
}

component_version() { # component
  case "$1" in
    etcd) echo "${ETCD_VERSION}" ;;
    helm) echo "${HELM_VERSION}" ;;
    kwok) echo "${KWOK_VERSION}" ;;
    containerd | containerd-shim-runc-v2 | ctr) echo "${CONTAINERD_VERSION}" ;;
    coredns) echo "${COREDNS_VERSION}-${COREDNS_BUILD}" ;;
    pause) echo "${PAUSE_VERSION}" ;;
    versitygw) echo "${VERSITYGW_VERSION}" ;;
    kind) echo "${KIND_VERSION}" ;;
    prometheus | promtool) echo "${PROMETHEUS_VERSION}" ;;
    krew) echo "${KREW_VERSION}" ;;
    *) echo "${KUBERNETES_VERSION}" ;;
  esac
}

prometheus_components=(prometheus promtool)
all_components=(etcd "${kube_components[@]}" helm kwok "${containerd_components[@]}" coredns pause versitygw kind "${prometheus_components[@]}" krew)

is_cached() { # component
  local c="$1"
  [[ -x "$(component_dir "$c" "$(component_version "$c")")/$c" ]]
}

case "${1:-}" in
  --print-bin-dir)
    echo "${set_dir}"
    exit 0
    ;;
  --check)
    for c in "${all_components[@]}"; do
      is_cached "$c" || { echo "missing: $c" >&2; exit 1; }
    done
    exit 0
    ;;
  "") ;;
  *)
    echo "usage: $0 [--print-bin-dir|--check]" >&2
    exit 2
    ;;
esac

command -v go >/dev/null || { echo "error: go is not installed" >&2; exit 1; }

export GOFLAGS="-mod=mod"
export CGO_ENABLED=0
# Two cores: two compile jobs at a time keeps memory and the machine responsive.
jobs="${CJOB_BUILD_JOBS:-2}"
ldflags_common="-s -w"
started_all=$(date +%s)

log() { echo "[build $(date +%H:%M:%S)] $*" >&2; }

install_into() { # component version tmpfile
  local dir
  dir="$(component_dir "$1" "$2")"
  mkdir -p "${dir}"
  mv -f "$3" "${dir}/$1.tmp"
  mv -f "${dir}/$1.tmp" "${dir}/$1"
}

new_wrapper() { # name -> prints dir
  local dir="${work_root}/$1"
  rm -rf "${dir}"
  mkdir -p "${dir}"
  echo "${dir}"
}

# go install commands of one module at one version, each into the cache folder of the
# component it is named after, in one go (they share the compile).
go_install_commands() { # version ldflags command-package...
  local version="$1" flags="$2" dir t0 pkg name
  shift 2
  local names=() targets=()
  for pkg in "$@"; do
    names+=("${pkg##*/}")
    targets+=("${pkg}@${version}")
  done
  t0=$(date +%s)
  dir="$(new_wrapper "${names[0]}-${version}")"
  log "${names[*]} ${version}: compiling"
  GOBIN="${dir}" go install -p "${jobs}" -trimpath -ldflags "${flags}" "${targets[@]}"
  for name in "${names[@]}"; do
    install_into "${name}" "${version}" "${dir}/${name}"
  done
  log "${names[*]} ${version}: done in $(($(date +%s) - t0))s"
}

build_etcd() {
  local dir t0
  t0=$(date +%s)
  dir="$(new_wrapper "etcd-${ETCD_VERSION}")"
  cat >"${dir}/go.mod" <<MOD
module checkpointed-jobs.local/etcdbuild

go 1.26.0

require (
	go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/api/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/client/pkg/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/client/v3 ${ETCD_VERSION}
	go.etcd.io/etcd/pkg/v3 ${ETCD_VERSION}
)
MOD
  log "etcd ${ETCD_VERSION}: resolving modules"
  (cd "${dir}" && go mod download go.etcd.io/etcd/server/v3 >/dev/null)
  log "etcd ${ETCD_VERSION}: compiling"
  (cd "${dir}" && go build -p "${jobs}" -trimpath -ldflags "${ldflags_common}" \
    -o "${dir}/etcd" go.etcd.io/etcd/server/v3)
  install_into etcd "${ETCD_VERSION}" "${dir}/etcd"
  log "etcd ${ETCD_VERSION}: done in $(($(date +%s) - t0))s"
}

build_kubernetes() {
  local dir t0 kv mod_file staging m pkgs=()
  t0=$(date +%s)
  kv="${KUBERNETES_VERSION}"
  staging="v0.${kv#v1.}"
  dir="$(new_wrapper "kubernetes-${kv}")"
  log "kubernetes ${kv}: reading its go.mod"
  local info
  info="$(cd "${dir}" && go mod download -json "k8s.io/kubernetes@${kv}" || true)"
  if grep -q '"Error"' <<<"${info}"; then
    echo "error: k8s.io/kubernetes@${kv} cannot be downloaded:" >&2
    echo "${info}" >&2
    exit 1
  fi
  mod_file="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' <<<"${info}")"
  [[ -f "${mod_file}" ]] || { echo "error: cannot read go.mod of k8s.io/kubernetes@${kv}" >&2; exit 1; }
  {
    echo "module checkpointed-jobs.local/kubebuild"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes ${kv}"
    echo
    echo "replace ("
    # Every staging module that k8s.io/kubernetes replaces with a local folder is
    # pinned to its published twin, v0.<minor>.<patch>.
    sed -n '/^replace (/,/^)/p' "${mod_file}" \
      | awk '/=> \.\/staging\// {print $1}' \
      | while read -r m; do echo "	${m} => ${m} ${staging}"; done
    echo ")"
  } >"${dir}/go.mod"
  # Only the components not cached yet (a new one in the list builds alone).
  local wanted=()
  for m in "${kube_components[@]}"; do
    is_cached "${m}" || { wanted+=("${m}"); pkgs+=("k8s.io/kubernetes/cmd/${m}"); }
  done
  log "kubernetes ${kv}: resolving modules (staging ${staging})"
  (cd "${dir}" && go mod download k8s.io/kubernetes >/dev/null)
  log "kubernetes ${kv}: compiling ${wanted[*]} with -p ${jobs}"
  mkdir -p "${dir}/out"
  local minor="${kv#v1.}"
  minor="${minor%%.*}"
  local vpkg="k8s.io/component-base/version"
  local kflags="${ldflags_common} -X ${vpkg}.gitVersion=${kv} -X ${vpkg}.gitMajor=1"
  kflags+=" -X ${vpkg}.gitMinor=${minor} -X ${vpkg}.gitTreeState=clean"
  kflags+=" -X ${vpkg}.buildDate=1970-01-01T00:00:00Z"
  (cd "${dir}" && go build -p "${jobs}" -trimpath -ldflags "${kflags}" -o "${dir}/out/" "${pkgs[@]}")
  for m in "${wanted[@]}"; do
    install_into "${m}" "${kv}" "${dir}/out/${m}"
  done
  log "kubernetes ${kv}: done in $(($(date +%s) - t0))s"
}

build_helm() {
  local minor hflags p
  minor="${KUBERNETES_VERSION#v1.}"
  minor="${minor%%.*}"
  # helm reports this Kubernetes version to charts (.Capabilities.KubeVersion) when
  # it renders without a cluster, so it must match the apiserver built above.
  hflags="${ldflags_common} -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
  hflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    hflags+=" -X ${p}.k8sVersionMajor=1 -X ${p}.k8sVersionMinor=${minor}"
  done
  go_install_commands "${HELM_VERSION}" "${hflags}" helm.sh/helm/v3/cmd/helm
}

build_kwok() {
  go_install_commands "${KWOK_VERSION}" \
    "${ldflags_common} -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}" \
    sigs.k8s.io/kwok/cmd/kwok
}

build_containerd() {
  local dir t0 cv c pkgs=()
  t0=$(date +%s)
  cv="${CONTAINERD_VERSION}"
  dir="$(new_wrapper "containerd-${cv}")"
  cat >"${dir}/go.mod" <<MOD
module checkpointed-jobs.local/containerdbuild

go 1.26.0

require github.com/containerd/containerd/v2 ${cv}
MOD
  for c in "${containerd_components[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/${c}"); done
  log "containerd ${cv}: resolving modules"
  (cd "${dir}" && go mod download github.com/containerd/containerd/v2 >/dev/null \
    && go get "github.com/containerd/containerd/v2@${cv}" >/dev/null 2>&1)
  log "containerd ${cv}: compiling ${containerd_components[*]}"
  mkdir -p "${dir}/out"
  local vpkg="github.com/containerd/containerd/v2/version"
  # No btrfs, zfs or devmapper snapshotters: they need C headers and the node uses
  # overlayfs.
  (cd "${dir}" && go build -p "${jobs}" -trimpath -tags "no_btrfs no_zfs no_devmapper" \
    -ldflags "${ldflags_common} -X ${vpkg}.Version=${cv} -X ${vpkg}.Revision=release" \
    -o "${dir}/out/" "${pkgs[@]}")
  for c in "${containerd_components[@]}"; do
    install_into "${c}" "${cv}" "${dir}/out/${c}"
  done
  log "containerd ${cv}: done in $(($(date +%s) - t0))s"
}

build_coredns() {
  local dir t0 cv
  t0=$(date +%s)
  cv="${COREDNS_VERSION}"
  dir="$(new_wrapper "coredns-${cv}")"
  cat >"${dir}/go.mod" <<MOD
module checkpointed-jobs.local/corednsbuild

go 1.26.0

require github.com/coredns/coredns ${cv}
MOD
  # Only the plugins cluster DNS uses (the real node's Corefile, and kubeadm's in the
  # kind node: forward, loop, prometheus): the full set links every cloud provider's
  # SDK and takes several times as long to build. COREDNS_BUILD names this list.
  cat >"${dir}/main.go" <<'GO'
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
GO
  log "coredns ${cv}: resolving modules"
  (cd "${dir}" && go mod tidy >/dev/null 2>&1 || go mod download >/dev/null)
  log "coredns ${cv}: compiling (cluster DNS plugins only)"
  (cd "${dir}" && go build -p "${jobs}" -trimpath -ldflags "${ldflags_common}" -o "${dir}/coredns" .)
  install_into coredns "${cv}-${COREDNS_BUILD}" "${dir}/coredns"
  log "coredns ${cv}: done in $(($(date +%s) - t0))s"
}

build_pause() {
  local dir t0
  t0=$(date +%s)
  dir="$(new_wrapper "pause-${PAUSE_VERSION}")"
  cp "${here}/pause/main.go" "${dir}/main.go"
  printf 'module checkpointed-jobs.local/pause\n\ngo 1.26.0\n' >"${dir}/go.mod"
  log "pause ${PAUSE_VERSION}: compiling"
  (cd "${dir}" && go build -trimpath -ldflags "${ldflags_common}" -o "${dir}/pause" .)
  install_into pause "${PAUSE_VERSION}" "${dir}/pause"
  log "pause ${PAUSE_VERSION}: done in $(($(date +%s) - t0))s"
}

build_kind() {
  go_install_commands "${KIND_VERSION}" "${ldflags_common}" sigs.k8s.io/kind
}

build_versitygw() {
  go_install_commands "${VERSITYGW_VERSION}" "${ldflags_common}" \
    github.com/versity/versitygw/cmd/versitygw
}

# Both from one go install: they share most of their packages (about 4 minutes on two
# cores with an empty build cache, less beside the Kubernetes build).
build_prometheus() {
  go_install_commands "${PROMETHEUS_VERSION}" "${ldflags_common}" \
    github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
}

build_krew() {
  go_install_commands "${KREW_VERSION}" "${ldflags_common}" sigs.k8s.io/krew/cmd/krew
}

is_cached etcd || build_etcd
need_kube=0
for c in "${kube_components[@]}"; do is_cached "$c" || need_kube=1; done
[[ "${need_kube}" == 1 ]] && build_kubernetes
is_cached helm || build_helm
is_cached kwok || build_kwok
need_containerd=0
for c in "${containerd_components[@]}"; do is_cached "$c" || need_containerd=1; done
[[ "${need_containerd}" == 1 ]] && build_containerd
is_cached coredns || build_coredns
is_cached pause || build_pause
is_cached versitygw || build_versitygw
is_cached kind || build_kind
need_prometheus=0
for c in "${prometheus_components[@]}"; do is_cached "$c" || need_prometheus=1; done
[[ "${need_prometheus}" == 1 ]] && build_prometheus
is_cached krew || build_krew

mkdir -p "${set_dir}"
for c in "${all_components[@]}"; do
  ln -sfn "$(component_dir "$c" "$(component_version "$c")")/$c" "${set_dir}/$c"
done
log "all binaries ready in ${set_dir} ($(($(date +%s) - started_all))s)"
echo "${set_dir}"
