{{/* Chart name. */}}
{{- define "ndd-stream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name (release-based), at most 63 characters. */}}
{{- define "ndd-stream.fullname" -}}
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

{{- define "ndd-stream.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ndd-stream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ndd-stream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ndd-stream.labels" -}}
helm.sh/chart: {{ include "ndd-stream.chart" . }}
{{ include "ndd-stream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ndd-stream
{{- end }}

{{- define "ndd-stream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ndd-stream.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ndd-stream.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Where the topic-definition override is mounted (NDD_TOPICS_FILE). */}}
{{- define "ndd-stream.topicsFile" -}}
/etc/ndd-stream/topics/news.yaml
{{- end }}

{{/*
Fail early on values that would leak credentials or fight the chart:
- connection, TLS, state and web settings are set by the chart, not through config;
- SASL needs an existing Secret;
- credentials in extraEnv must use valueFrom.
*/}}
{{- define "ndd-stream.validate" -}}
{{- $reserved := list "brokers" "security_protocol" "sasl_mechanism" "sasl_username" "sasl_password" "ssl_cafile" "ssl_certfile" "ssl_keyfile" "ssl_check_hostname" "data_dir" "web_host" "web_port" "topics_file" "view_user" "view_password" }}
{{- range $key, $_ := .Values.config }}
{{- if has ($key | snakecase) $reserved }}
{{- fail (printf "config.%s is set by the chart (see kafka.*, persistence.*, webPort, topics.override, view.auth); remove it from config" $key) }}
{{- end }}
{{- end }}
{{- if and .Values.view.enabled .Values.view.auth.user (not .Values.view.auth.existingSecret) }}
{{- fail "view.auth.user needs view.auth.existingSecret: the Secret with the view's password" }}
{{- end }}
{{- if and (hasPrefix "SASL_" .Values.kafka.securityProtocol) (not .Values.kafka.sasl.existingSecret) }}
{{- fail "kafka.securityProtocol is SASL_*: set kafka.sasl.existingSecret to the name of a Secret with the SASL user name and password" }}
{{- end }}
{{- range .Values.extraEnv }}
{{- if and (regexMatch "^NDD_(SASL_PASSWORD|SASL_USERNAME|VIEW_PASSWORD)$" .name) (hasKey . "value") }}
{{- fail (printf "extraEnv %s must use valueFrom.secretKeyRef, not a literal value" .name) }}
{{- end }}
{{- end }}
{{- end }}

{{/* One value of config as an environment string (large numbers stay integers). */}}
{{- define "ndd-stream.envValue" -}}
{{- if or (kindIs "map" .) (kindIs "slice" .) }}
{{- toJson . }}
{{- else if and (kindIs "float64" .) (eq (. | float64) (. | floor)) }}
{{- . | int64 }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* NDD_* environment shared by the workers and the topics Job. The context may carry
"saslSecret": the topics Job's own login (topics.sasl.existingSecret, job-topics.yaml). */}}
{{- define "ndd-stream.env" -}}
{{- $saslSecret := .saslSecret | default .Values.kafka.sasl.existingSecret }}
- name: NDD_BROKERS
  value: {{ .Values.kafka.brokers | quote }}
- name: NDD_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}
- name: NDD_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
- name: NDD_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $saslSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: NDD_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $saslSecret }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if hasSuffix "SSL" .Values.kafka.securityProtocol }}
{{- if .Values.kafka.tls.caSecret }}
- name: NDD_SSL_CAFILE
  value: {{ printf "/etc/ndd-stream/kafka-ca/%s" .Values.kafka.tls.caKey | quote }}
{{- end }}
{{- if .Values.kafka.tls.clientSecret }}
- name: NDD_SSL_CERTFILE
  value: {{ printf "/etc/ndd-stream/kafka-client/%s" .Values.kafka.tls.certKey | quote }}
- name: NDD_SSL_KEYFILE
  value: {{ printf "/etc/ndd-stream/kafka-client/%s" .Values.kafka.tls.keyKey | quote }}
{{- end }}
- name: NDD_SSL_CHECK_HOSTNAME
  value: {{ .Values.kafka.tls.checkHostname | quote }}
{{- end }}
- name: NDD_DATA_DIR
  value: {{ .Values.persistence.mountPath | quote }}
- name: NDD_WEB_HOST
  value: "0.0.0.0"
- name: NDD_WEB_PORT
  value: {{ .Values.webPort | quote }}
{{- if .Values.topics.override }}
- name: NDD_TOPICS_FILE
  value: {{ include "ndd-stream.topicsFile" . | quote }}
{{- end }}
{{- range $key, $value := .Values.config }}
{{- if not (kindIs "invalid" $value) }}
- name: {{ printf "NDD_%s" ($key | snakecase | upper) }}
  value: {{ include "ndd-stream.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Kafka TLS Secrets as volumes (pod level). */}}
{{- define "ndd-stream.kafkaVolumes" -}}
{{- if hasSuffix "SSL" .Values.kafka.securityProtocol }}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.kafka.tls.caKey }}
        path: {{ .Values.kafka.tls.caKey }}
{{- end }}
{{- if .Values.kafka.tls.clientSecret }}
- name: kafka-client
  secret:
    secretName: {{ .Values.kafka.tls.clientSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.kafka.tls.certKey }}
        path: {{ .Values.kafka.tls.certKey }}
      - key: {{ .Values.kafka.tls.keyKey }}
        path: {{ .Values.kafka.tls.keyKey }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ndd-stream.kafkaVolumeMounts" -}}
{{- if hasSuffix "SSL" .Values.kafka.securityProtocol }}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: /etc/ndd-stream/kafka-ca
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.clientSecret }}
- name: kafka-client
  mountPath: /etc/ndd-stream/kafka-client
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/*
A Kubernetes memory quantity (2Gi, 1500Mi, 2G, 2147483648) in bytes, for PromQL.
*/}}
{{- define "ndd-stream.bytes" -}}
{{- $q := toString . -}}
{{- $bytes := "" -}}
{{- range $unit := list (list "Ki" 1024.0) (list "Mi" 1048576.0) (list "Gi" 1073741824.0) (list "Ti" 1099511627776.0) (list "k" 1000.0) (list "M" 1000000.0) (list "G" 1000000000.0) (list "T" 1000000000000.0) -}}
{{- if and (not $bytes) (hasSuffix (index $unit 0) $q) -}}
{{- $bytes = printf "%.0f" (mulf (float64 (trimSuffix (index $unit 0) $q)) (index $unit 1)) -}}
{{- end -}}
{{- end -}}
{{- if not $bytes -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?$" $q) -}}
{{- fail (printf "resources.limits.memory %q: not a quantity the alert rules understand (use Ki, Mi, Gi, Ti, k, M, G, T or bytes)" $q) -}}
{{- end -}}
{{- $bytes = printf "%.0f" (float64 $q) -}}
{{- end -}}
{{- $bytes -}}
{{- end -}}
