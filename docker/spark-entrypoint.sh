#!/usr/bin/env bash
# Entrypoint of the runtime image.
#
#   executor        what Spark on Kubernetes runs in an executor pod: the executor
#                   JVM, configured from the SPARK_* variables the driver sets.
#   driver ARGS...  spark-submit in client mode inside the pod (Spark's cluster mode).
#   anything else   run as given (the operator's `python -m job_runtime run ...`).
set -euo pipefail

spark_classpath() {
  local cp="${SPARK_CLASSPATH:-}"
  [[ -n "${cp}" ]] && cp+=":"
  cp+="${SPARK_HOME}/jars/*"
  [[ -d "${SPARK_CONF_DIR:-}" ]] && cp="${SPARK_CONF_DIR}:${cp}"
  echo "${cp}"
}

# The driver passes executor JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...;
# their order matters, so they are sorted by index.
java_opts=()
while IFS= read -r name; do
  java_opts+=("${!name}")
done < <(env | sed -n 's/^\(SPARK_JAVA_OPT_[0-9]*\)=.*/\1/p' | sort -t_ -k4 -n)

case "${1:-}" in
  executor)
    shift
    : "${SPARK_DRIVER_URL:?set by Spark on the executor pod}"
    : "${SPARK_EXECUTOR_ID:?set by Spark on the executor pod}"
    if [[ -n "${SPARK_EXECUTOR_DIRS:-}" ]]; then
      export SPARK_LOCAL_DIRS="${SPARK_EXECUTOR_DIRS}"
    fi
    pod_ip="${SPARK_EXECUTOR_POD_IP:-$(hostname -i)}"
    [[ "${pod_ip}" == *:* && "${pod_ip}" != \[* ]] && pod_ip="[${pod_ip}]"   # IPv6
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY:-1g}" -Xmx"${SPARK_EXECUTOR_MEMORY:-1g}" \
      -cp "$(spark_classpath)" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES:-1}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${pod_ip}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-${HOSTNAME}}" \
      "$@"
    ;;
  driver)
    shift
    exec "${SPARK_HOME}/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
