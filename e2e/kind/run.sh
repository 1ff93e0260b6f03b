#!/usr/bin/env bash
# Whole-system scenario on kind, as a user would run it:
#   1. build the operator and runtime images (docker), create a kind cluster and load them;
#   2. install MinIO (S3 API) and create its buckets;
#   3. helm install charts/checkpointed-jobs;
#   4. apply the running-sum CheckpointedJob with s3:// checkpoints and output on MinIO;
#   5. wait for a completed checkpoint, delete the driver pod, wait for the restart
#      from the latest checkpoint and for phase Succeeded;
#   6. check status.restoredFrom, copy the output from MinIO and verify it is
#      exactly-once (examples/running_sum/verify.py), and read the operator's metrics.
#
# Usage: e2e/kind/run.sh            (from anywhere; needs docker, kind, kubectl, helm)
# Environment:
#   CJOB_KIND_CLUSTER   cluster name (default cjob-e2e)
#   CJOB_KIND_REUSE=1   use the existing cluster of that name (no create, no delete)
#   CJOB_KIND_KEEP=1    keep the cluster afterwards (to look around)
#   CJOB_KIND_SKIP_BUILD=1  use already built images
#   KIND_NODE_IMAGE     node image for kind create cluster (kind's default otherwise)
#   MINIO_IMAGE         MinIO server image
#   CJOB_E2E_COUNT, CJOB_E2E_RATE   records of the job and its rate (records/s)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
cluster="${CJOB_KIND_CLUSTER:-cjob-e2e}"
tag="e2e"
operator_image="checkpointed-jobs/operator:${tag}"
runtime_image="checkpointed-jobs/runtime:${tag}"
minio_image="${MINIO_IMAGE:-quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z}"
namespace="cjob-e2e"
operator_namespace="cjob-system"
release="cjob"
count="${CJOB_E2E_COUNT:-200000}"
rate="${CJOB_E2E_RATE:-5000}"
work="$(mktemp -d "${TMPDIR:-/tmp}/cjob-kind.XXXXXX")"
export KUBECONFIG="${work}/kubeconfig"
started=$(date +%s)

log() { echo "[kind-e2e +$(($(date +%s) - started))s] $*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

for tool in docker kind kubectl helm; do
  command -v "${tool}" >/dev/null || fail "${tool} is not on PATH"
done
docker info >/dev/null 2>&1 || fail "the Docker engine is not reachable (docker info)"

# Fill ${NAMESPACE}, ${RUNTIME_IMAGE}, ${MINIO_IMAGE}, ${COUNT}, ${RATE} in a manifest.
render() {
  sed -e "s|\${NAMESPACE}|${namespace}|g" -e "s|\${RUNTIME_IMAGE}|${runtime_image}|g" \
      -e "s|\${MINIO_IMAGE}|${minio_image}|g" -e "s|\${COUNT}|${count}|g" \
      -e "s|\${RATE}|${rate}|g" "$1"
}

# wait_until DESCRIPTION TIMEOUT_SECONDS COMMAND...: poll until COMMAND succeeds.
wait_until() {
  local what="$1" timeout="$2" deadline
  shift 2
  deadline=$(($(date +%s) + timeout))
  until "$@" >/dev/null; do
    (($(date +%s) < deadline)) || fail "timed out after ${timeout}s waiting for ${what}"
    sleep 2
  done
  log "${what}: ok"
}

cjob_field() { # jsonpath below .status
  kubectl -n "${namespace}" get checkpointedjob running-sum -o "jsonpath={.status.$1}" 2>/dev/null
}
has_checkpoint() { [[ -n "$(cjob_field latestCheckpoint.id)" ]]; }
has_restored() { [[ -n "$(cjob_field restoredFrom.id)" ]]; }
has_succeeded() {
  local phase
  phase="$(cjob_field phase)"
  [[ "${phase}" == "Failed" ]] && fail "the job failed: $(cjob_field lastFailure)"
  [[ "${phase}" == "Succeeded" ]]
}

diagnostics() {
  log "diagnostics (cluster ${cluster})"
  kubectl get nodes -o wide || true
  kubectl get all,checkpointedjobs,configmaps -A -l 'app.kubernetes.io/managed-by' || true
  kubectl -n "${namespace}" get checkpointedjob running-sum -o yaml || true
  kubectl -n "${namespace}" get events --sort-by=.lastTimestamp | tail -40 || true
  kubectl -n "${operator_namespace}" logs "deployment/${release}-checkpointed-jobs" --tail=200 || true
  local pod
  for pod in $(kubectl -n "${namespace}" get pods -o name 2>/dev/null); do
    echo "--- ${pod}"
    kubectl -n "${namespace}" logs "${pod}" --tail=80 || true
  done
}

cleanup() {
  local rc=$?
  if ((rc != 0)); then diagnostics; fi
  if [[ "${CJOB_KIND_REUSE:-0}" != 1 && "${CJOB_KIND_KEEP:-0}" != 1 ]]; then
    kind delete cluster --name "${cluster}" >/dev/null 2>&1 || true
  elif [[ "${CJOB_KIND_KEEP:-0}" == 1 ]]; then
    log "cluster ${cluster} kept; kind export kubeconfig --name ${cluster} to use it"
  fi
  rm -rf "${work}"
  exit "${rc}"
}
trap cleanup EXIT

# 1. images and cluster -------------------------------------------------------------
if [[ "${CJOB_KIND_SKIP_BUILD:-0}" != 1 ]]; then
  log "building ${operator_image} and ${runtime_image}"
  docker build -f "${repo}/docker/operator.Dockerfile" -t "${operator_image}" "${repo}"
  docker build -f "${repo}/docker/runtime.Dockerfile" -t "${runtime_image}" "${repo}"
fi
if [[ "${CJOB_KIND_REUSE:-0}" == 1 ]]; then
  kind export kubeconfig --name "${cluster}" --kubeconfig "${KUBECONFIG}"
else
  log "creating kind cluster ${cluster}"
  image_args=()
  [[ -n "${KIND_NODE_IMAGE:-}" ]] && image_args=(--image "${KIND_NODE_IMAGE}")
  kind create cluster --name "${cluster}" --config "${here}/cluster.yaml" \
    --kubeconfig "${KUBECONFIG}" --wait 180s ${image_args[@]+"${image_args[@]}"}
fi
kind load docker-image --name "${cluster}" "${operator_image}" "${runtime_image}"

# 2. MinIO ----------------------------------------------------------------------------
kubectl create namespace "${namespace}" --dry-run=client -o yaml | kubectl apply -f -
render "${here}/manifests/minio.yaml" | kubectl apply -f -
kubectl -n "${namespace}" rollout status deployment/minio --timeout=300s
kubectl -n "${namespace}" wait --for=condition=complete job/minio-buckets --timeout=300s
log "MinIO ready with buckets cjob-checkpoints and cjob-output"

# 3. the chart --------------------------------------------------------------------------
helm install "${release}" "${repo}/charts/checkpointed-jobs" \
  --namespace "${operator_namespace}" --create-namespace \
  --set image.repository="${operator_image%:*}" --set image.tag="${tag}" \
  --set image.pullPolicy=Never --set "watchNamespaces={${namespace}}" \
  --set logLevel=DEBUG --wait --timeout 300s
log "operator installed"

# 4. the job ------------------------------------------------------------------------------
render "${here}/manifests/running-sum.yaml" | kubectl apply -f -
wait_until "a completed checkpoint" 600 has_checkpoint
first_driver="$(cjob_field driverPod)"
log "checkpoint $(cjob_field latestCheckpoint.id) completed; driver ${first_driver}"

# 5. kill the driver and recover ----------------------------------------------------------
sleep 3   # let a little more uncheckpointed work happen, so recovery has work to redo
kubectl -n "${namespace}" delete pod "${first_driver}" --wait=false
log "deleted driver pod ${first_driver}"
wait_until "a restart from the latest checkpoint" 600 has_restored
log "attempt $(cjob_field attempt) restored from checkpoint $(cjob_field restoredFrom.id)"
wait_until "phase Succeeded" 900 has_succeeded

# 6. checks -------------------------------------------------------------------------------
restarts="$(cjob_field restarts)"
((restarts >= 1)) || fail "status.restarts is ${restarts}, expected at least 1"
[[ "$(cjob_field driverPod)" != "${first_driver}" ]] || fail "no new driver pod"
render "${here}/manifests/verify-output.yaml" | kubectl apply -f -
if ! kubectl -n "${namespace}" wait --for=condition=complete job/verify-output --timeout=300s; then
  kubectl -n "${namespace}" logs job/verify-output || true
  fail "the output is not exactly-once"
fi
verdict="$(kubectl -n "${namespace}" logs job/verify-output | tail -1)"
log "${verdict}"
[[ "${verdict}" == *"output exactly-once"* ]] || fail "unexpected verdict: ${verdict}"

metrics="$(kubectl get --raw \
  "/api/v1/namespaces/${operator_namespace}/services/http:${release}-checkpointed-jobs-metrics:8080/proxy/metrics")"
grep -q '^cjob_operator_' <<<"${metrics}" || fail "no cjob_operator_ metrics at the operator"
log "operator metrics: $(grep -c '^cjob_operator_' <<<"${metrics}") cjob_operator_ samples"

log "PASSED: restored from checkpoint $(cjob_field restoredFrom.id), ${restarts} restart(s), output exactly-once"
