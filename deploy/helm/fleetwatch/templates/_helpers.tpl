{{/* The name of the objects: the release's, or fullnameOverride. */}}
{{- define "fleetwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the release's pods. */}}
{{- define "fleetwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The pod template's labels: the kustomize base's. */}}
{{- define "fleetwatch.podLabels" -}}
{{ include "fleetwatch.selectorLabels" . }}
app.kubernetes.io/component: inventory
app.kubernetes.io/part-of: fleetwatch
{{- end -}}

{{/* Every object's labels: the pod's and Helm's standard ones. */}}
{{- define "fleetwatch.labels" -}}
{{ include "fleetwatch.podLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The Secrets the pod mounts. */}}
{{- define "fleetwatch.kubeconfigsSecret" -}}
{{- default (printf "%s-kubeconfigs" (include "fleetwatch.fullname" .)) .Values.kubeconfigs.secretName -}}
{{- end -}}
{{- define "fleetwatch.tlsSecret" -}}
{{- default (printf "%s-tls" (include "fleetwatch.fullname" .)) .Values.tls.secretName -}}
{{- end -}}
{{- define "fleetwatch.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "fleetwatch.fullname" .)) .Values.auth.tokensSecretName -}}
{{- end -}}

{{/* Whether the warm handover is on: sharded, with sharding.handover. */}}
{{- define "fleetwatch.handover" -}}
{{- if and .Values.sharding.enabled .Values.sharding.handover }}true{{ end -}}
{{- end -}}

{{/* Whether the home cluster reviews tokens and access, which takes the ClusterRoleBinding
to system:auth-delegator: auth.delegated, or the warm handover. */}}
{{- define "fleetwatch.delegated" -}}
{{- if or .Values.auth.delegated (include "fleetwatch.handover" .) }}true{{ end -}}
{{- end -}}

{{/* The daemon's config.yaml: config, with the keys the chart sets, of which config may
set none (a clear error rather than one of the two silently ignored). */}}
{{- define "fleetwatch.config" -}}
{{- $owned := dict
  "kubeconfig" "kubeconfigs"
  "snapshot.path" "persistence"
  "server.address" "nothing: the chart serves on port 8443"
  "server.tls.certFile" "tls.secretName"
  "server.tls.keyFile" "tls.secretName"
  "server.auth.tokenFile" "auth.tokensSecretName"
  "server.auth.delegated.enabled" "auth.delegated"
  "shard.enabled" "sharding.enabled"
  "shard.address" "sharding.enabled"
  "shard.peerCaFile" "sharding.handover"
-}}
{{- range $path, $instead := $owned -}}
{{- $cur := $.Values.config -}}
{{- $found := true -}}
{{- range $key := splitList "." $path -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur $key) -}}
{{- $cur = index $cur $key -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if $found -}}
{{- fail (printf "config.%s: the chart sets it; set %s instead" $path $instead) -}}
{{- end -}}
{{- end -}}
{{- $server := dict
  "address" ":8443"
  "tls" (dict "certFile" "/etc/fleetwatch/tls/tls.crt" "keyFile" "/etc/fleetwatch/tls/tls.key")
  "auth" (dict "tokenFile" "/etc/fleetwatch/auth/tokens")
-}}
{{- if .Values.auth.delegated -}}
{{- $_ := set $server.auth "delegated" (dict "enabled" true) -}}
{{- end -}}
{{- $chart := dict
  "kubeconfig" (list "/etc/fleetwatch/kubeconfigs")
  "snapshot" (dict "path" "/var/lib/fleetwatch/fleetwatch.db")
  "server" $server
-}}
{{- toYaml (mustMergeOverwrite (deepCopy .Values.config) $chart) -}}
{{- end -}}

{{/* The spec of the snapshot's claim. */}}
{{- define "fleetwatch.claimSpec" -}}
accessModes: [ReadWriteOnce]
{{- with .Values.persistence.storageClassName }}
storageClassName: {{ . }}
{{- end }}
resources:
  requests:
    storage: {{ .Values.persistence.size }}
{{- end -}}
