{{/*
Chart name, truncated to 63 characters (the DNS label limit of Kubernetes names).
*/}}
{{- define "cjob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: "<release>-<chart>", or the release name when it already contains the
chart name, so "helm install checkpointed-jobs ." does not repeat itself.
*/}}
{{- define "cjob.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<chart>-<version>" for the helm.sh/chart label ("+" is not allowed in label values).
*/}}
{{- define "cjob.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that never change for the life of a release: used in selectors.
*/}}
{{- define "cjob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The standard labels every object of the chart carries.
*/}}
{{- define "cjob.labels" -}}
helm.sh/chart: {{ include "cjob.chart" . }}
{{ include "cjob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: checkpointed-jobs
app.kubernetes.io/component: operator
{{- end }}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "cjob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cjob.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Operator image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "cjob.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Image of jobs without spec.image (--runtime-image); the tag defaults to the chart's
appVersion. Empty when runtimeImage.repository is empty.
*/}}
{{- define "cjob.runtimeImage" -}}
{{- if .Values.runtimeImage.repository }}
{{- printf "%s:%s" .Values.runtimeImage.repository (default .Chart.AppVersion .Values.runtimeImage.tag) }}
{{- end }}
{{- end }}

{{/*
"true" when kopf peering is on: asked for, or needed because several replicas run.
*/}}
{{- define "cjob.peeringEnabled" -}}
{{- if or .Values.peering.enabled (gt (int .Values.replicaCount) 1) }}true{{- end }}
{{- end }}

{{/*
Name of the kopf peering object.
*/}}
{{- define "cjob.peeringName" -}}
{{- default (include "cjob.fullname" .) .Values.peering.name }}
{{- end }}

{{/*
"true" when the operator watches every namespace (watchNamespaces is empty).
*/}}
{{- define "cjob.clusterWide" -}}
{{- if not .Values.watchNamespaces }}true{{- end }}
{{- end }}

{{/*
Rules the operator needs in every namespace whose CheckpointedJobs it manages. Used by
the ClusterRole (all namespaces) or by one Role per watched namespace.

The operator grants each job's driver a Role (pods, configmaps, events). Kubernetes
only lets it create that Role and its RoleBinding when it holds every granted
permission itself, so the pod, configmap and event rules below are a superset of the
driver's; this avoids the much broader "escalate" and "bind" verbs.
*/}}
{{- define "cjob.namespacedRules" -}}
# The custom resource: kopf lists and watches it, patches finalizers and its own
# annotations, and writes the status subresource.
- apiGroups: ["checkpointed.io"]
  resources: ["checkpointedjobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["checkpointed.io"]
  resources: ["checkpointedjobs/status"]
  verbs: ["get", "patch"]
# Snapshots: kopf watches them and patches their finalizer, the operator writes their
# status, and creates and prunes the ones a job's spec.snapshots asks for. Their pods
# (below) copy and delete checkpoint data with the job's credentials.
- apiGroups: ["checkpointed.io"]
  resources: ["checkpointedjobsnapshots"]
  verbs: ["get", "list", "watch", "patch", "create", "delete"]
- apiGroups: ["checkpointed.io"]
  resources: ["checkpointedjobsnapshots/status"]
  verbs: ["get", "patch"]
# Driver pods (and, with spark.master k8s, the driver's executor pods, which the
# driver's Role may manage, so the operator must hold the same verbs), and the
# cleanup pod that deletes a deleted job's checkpoint data. No Secrets: the kubelet
# hands a job's S3 credentials to its pods, the operator never reads them. Patch: a
# promoted standby driver is relabelled as its attempt's driver.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete", "deletecollection"]
# Checkpoint metadata ConfigMaps (<job>-checkpoints): created, fenced and annotated by
# the operator, deleted with cleanupPolicy Delete.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# The headless Service giving each driver a stable name for its executors.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "create", "patch", "delete"]
# Each job's driver ServiceAccount and the Role and RoleBinding granting it its rights.
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch", "delete"]
# Events for every decision (kopf uses core events; drivers may use either API).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Each job with spark.master k8s gets a Secret holding its Spark RPC key. Created only:
# the operator never reads a Secret, and an existing key is left as it is.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
{{- if .Values.networkPolicy.enabled }}
# Each job's NetworkPolicy, admitting only the job's own pods.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
{{- end }}
{{- if include "cjob.peeringEnabled" . }}
{{- if not (include "cjob.clusterWide" .) }}
# kopf peering in namespaced mode: one KopfPeering per watched namespace.
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}
{{- end }}

{{/*
Rules the operator needs at cluster scope whatever it watches.
*/}}
{{- define "cjob.clusterRules" -}}
# kopf scans CustomResourceDefinitions to resolve its resources and to notice when a
# CRD appears or goes away.
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
# A driver's node that stopped reporting (Ready Unknown) ends its attempt at once,
# instead of after the pod's eviction minutes later: the operator reads that node.
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
{{- if not (include "cjob.clusterWide" .) }}
# kopf lists and watches namespaces to match watchNamespaces; without this it retries
# the refused list for about a minute before it falls back to the names as given.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- if and (include "cjob.peeringEnabled" .) (include "cjob.clusterWide" .) }}
# kopf peering in cluster-wide mode: one ClusterKopfPeering.
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end }}
