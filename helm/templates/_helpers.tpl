{{/* Labels on every object: the recommended app.kubernetes.io set plus the chart that made it. */}}
{{- define "flower.labels" -}}
app.kubernetes.io/name: flower
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The service's pod: the Deployment's selector, the Service's and the NetworkPolicies'. Fixed once
     installed (Kubernetes forbids changing a Deployment's selector); no other pod of the chart carries both. */}}
{{- define "flower.selectorLabels" -}}
app.kubernetes.io/name: flower
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "flower.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ .Release.Name }}{{ else }}{{ .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{- define "flower.claimName" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-data" .Release.Name) }}
{{- end }}

{{/* The claim as the backend labels runs with it (label_value in sandbox/backends/kubernetes.py):
     the name itself when it is a valid label value, else h-<16 hex of its sha256>. */}}
{{- define "flower.claimLabel" -}}
{{- $claim := include "flower.claimName" . }}
{{- if and (le (len $claim) 63) (regexMatch "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$" $claim) }}
{{- $claim }}
{{- else }}
{{- printf "h-%s" (sha256sum $claim | trunc 16) }}
{{- end }}
{{- end }}

{{/* A count of seconds as the backend reads it: "" for none, else a whole number (never 1e+06). */}}
{{- define "flower.seconds" -}}
{{- if eq (toString .) "" }}""{{ else }}{{ int64 . | toString | quote }}{{ end }}
{{- end }}

{{/* The pod-level hardening shared by the service pod and the test pod (the Docker backend's list). */}}
{{- define "flower.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ int64 .Values.securityContext.runAsUser }}
runAsGroup: {{ int64 .Values.securityContext.runAsGroup }}
fsGroup: {{ int64 .Values.securityContext.runAsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "flower.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* A scratch emptyDir: bounded, on disk or (medium Memory) in RAM counted against the pod's memory limit. */}}
{{- define "flower.scratch" -}}
emptyDir:
  sizeLimit: {{ .Values.scratch.sizeLimit | quote }}
  {{- with .Values.scratch.medium }}
  medium: {{ . }}
  {{- end }}
{{- end }}

{{/* Egress to the cluster DNS (UDP and TCP 53), for both NetworkPolicies. */}}
{{- define "flower.dnsEgress" -}}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: {{ .Values.dns.namespace }}
      podSelector:
        matchLabels:
          {{- toYaml .Values.dns.podLabels | nindent 10 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end }}
{{/* This release's runs' pods: the backend labels each flower.run and flower.claim (the claim's label). */}}
{{- define "flower.runPods" -}}
matchLabels:
  flower.claim: {{ include "flower.claimLabel" . | quote }}
matchExpressions:
  - key: flower.run
    operator: Exists
{{- end }}

{{/* The gateway's pod (gateway.separate): its Deployment's selector, its Service's and the NetworkPolicies'.
     Not app.kubernetes.io/name=flower, so the service's Deployment and Service never pick it. */}}
{{- define "flower.gatewaySelectorLabels" -}}
app.kubernetes.io/name: flower-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Where runs' pods call the model gateway: the gateway's own Service, or the service's. */}}
{{- define "flower.gatewayUrl" -}}
{{- if .Values.gateway.separate -}}
http://{{ .Release.Name }}-gateway.{{ .Release.Namespace }}.svc:{{ .Values.gateway.port }}
{{- else -}}
http://{{ .Release.Name }}.{{ .Release.Namespace }}.svc:{{ .Values.gateway.port }}
{{- end }}
{{- end }}

{{/* What values.schema.json refuses for replicas >= 2, said again as sentences (a chart rendered without its
     schema, e.g. --skip-schema-validation, still stops here). */}}
{{- define "flower.validate" -}}
{{- if and .Values.environment.registry (not .Values.environment.dockerHost) }}
{{- fail "environment.registry needs environment.dockerHost: the Docker engine that prepares a team's environment and pushes it there (DOCKER_HOST); see \"A team's own environment\" in helm/README.md" }}
{{- end }}
{{- $n := int64 .Values.replicas }}
{{- if ge $n 2 }}
{{- if not .Values.database.existingSecret }}
{{- fail (printf "replicas: %d needs database.existingSecret (a Secret holding the registry's postgresql:// URL): the SQLite registry on the data volume serves one replica only; see \"Two or more replicas\" in helm/README.md" $n) }}
{{- end }}
{{- if ne .Values.persistence.accessMode "ReadWriteMany" }}
{{- fail (printf "replicas: %d needs persistence.accessMode ReadWriteMany: the replicas read each other's run folders on the data volume" $n) }}
{{- end }}
{{- if not .Values.gateway.separate }}
{{- fail (printf "replicas: %d needs gateway.separate: true: one gateway serves a data dir, so the API pods cannot each start their own" $n) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The registry's URL from the operator's Secret (database.existingSecret), as service.config reads it. */}}
{{- define "flower.databaseEnv" -}}
{{- with .Values.database.existingSecret -}}
- name: FLOWER_SERVICE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.database.key }}
{{- end }}
{{- end }}

{{/* Egress to PostgreSQL (database.cidrs, or any address, on database.port), when the registry is there. */}}
{{- define "flower.databaseEgress" -}}
{{- if .Values.database.existingSecret -}}
- ports:
    - protocol: TCP
      port: {{ .Values.database.port }}
  {{- with .Values.database.cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Egress to the model's API (service.networkPolicy.modelUpstream): the gateway's way out. */}}
{{- define "flower.modelEgress" -}}
{{- with .Values.service.networkPolicy.modelUpstream -}}
- ports:
    - protocol: TCP
      port: {{ .port }}
  {{- with .cidrs }}
  to:
    {{- range . }}
    - ipBlock:
        cidr: {{ . }}
    {{- end }}
  {{- end }}
{{- end }}
{{- end }}
