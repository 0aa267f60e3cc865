{{/* Labels every object carries. */}}
{{- define "diskplane.labels" -}}
app.kubernetes.io/name: diskplane
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.customLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component (controller or node). */}}
{{- define "diskplane.selectorLabels" -}}
app.kubernetes.io/name: diskplane
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The plugin image reference: pinned by digest when one is given (release
charts), else by tag. */}}
{{- define "diskplane.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end -}}
{{- end -}}

{{/* A sidecar's image reference, from its values. */}}
{{- define "diskplane.sidecarImage" -}}
{{ .image.repository }}:{{ .image.tag }}
{{- end -}}

{{/* The startup taint key. */}}
{{- define "diskplane.startupTaintKey" -}}
{{ .Values.driverName }}/agent-not-ready
{{- end -}}

{{/* Where the node plugin's socket lives on the host. */}}
{{- define "diskplane.node.pluginDir" -}}
{{ trimSuffix "/" .Values.node.kubeletDir }}/plugins/{{ .Values.driverName }}
{{- end -}}

{{/* Flags every leader-elected controller sidecar gets, then its own. */}}
{{- define "diskplane.sidecarCommonArgs" -}}
- --csi-address=/csi/csi.sock
- --v={{ .sidecar.logLevel }}
- --leader-election=true
- --leader-election-lease-duration={{ .root.Values.sidecars.leaderElection.leaseDuration }}
- --leader-election-renew-deadline={{ .root.Values.sidecars.leaderElection.renewDeadline }}
- --leader-election-retry-period={{ .root.Values.sidecars.leaderElection.retryPeriod }}
- --kube-api-qps={{ .sidecar.kubeAPIQPS }}
- --kube-api-burst={{ .sidecar.kubeAPIBurst }}
- --retry-interval-start={{ .sidecar.retryIntervalStart }}
- --retry-interval-max={{ .sidecar.retryIntervalMax }}
- --http-endpoint=:{{ .port }}
{{- end -}}

{{/* What a controller sidecar container has besides its name, image and
     flags: the socket, its metrics port, a liveness check of its leader
     election, resources and security context. */}}
{{- define "diskplane.sidecarCommon" -}}
ports:
  - name: {{ .portName }}
    containerPort: {{ .port }}
    protocol: TCP
livenessProbe:
  httpGet:
    path: /healthz/leader-election
    port: {{ .portName }}
  initialDelaySeconds: 10
  periodSeconds: 20
  timeoutSeconds: 10
  failureThreshold: 5
volumeMounts:
  - name: socket-dir
    mountPath: /csi
{{- with .sidecar.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.sidecars.securityContext | nindent 2 }}
{{- end -}}

{{/* The HOST_IP variable, so that endpoint values can say $(HOST_IP). */}}
{{- define "diskplane.hostIPEnv" -}}
- name: HOST_IP
  valueFrom:
    fieldRef:
      fieldPath: status.hostIP
{{- end -}}

{{/* Name of the Secret with static AWS keys, empty when there is none. */}}
{{- define "diskplane.awsSecretName" -}}
{{- $c := .Values.controller.awsCredentials -}}
{{- if $c.secretName -}}
{{ $c.secretName }}
{{- else if $c.create -}}
diskplane-aws-credentials
{{- end -}}
{{- end -}}

{{/* The extra tags as the plugin's --extra-tags value: k=v,... sorted. */}}
{{- define "diskplane.extraTags" -}}
{{- $tags := list -}}
{{- range $k, $v := .Values.controller.extraTags -}}
{{- $tags = append $tags (printf "%s=%s" $k $v) -}}
{{- end -}}
{{ join "," $tags }}
{{- end -}}

{{/* The Windows plugin image reference: the tag defaults to the chart's
     version and the flavour of node.windows.mode. */}}
{{- define "diskplane.windowsImage" -}}
{{- $w := .Values.node.windows -}}
{{- $flavour := ternary "hostprocess" "ltsc2022" (eq $w.mode "hostProcess") -}}
{{ $w.image.repository }}:{{ $w.image.tag | default (printf "v%s-%s" .Chart.AppVersion $flavour) }}
{{- end -}}

{{/* The Windows kubelet directory, without a trailing backslash. */}}
{{- define "diskplane.windows.kubeletDir" -}}
{{ trimSuffix "\\" .Values.node.windows.kubeletDir }}
{{- end -}}

{{/* Where the Windows node plugin's socket lives on the host. */}}
{{- define "diskplane.windows.pluginDir" -}}
{{ include "diskplane.windows.kubeletDir" . }}\plugins\{{ .Values.driverName }}
{{- end -}}

{{/*
The csi-proxy pipes the Windows node plugin uses (API group and version:
pipe). volume-v2alpha1 only shows, at start, that csi-proxy is v1.1.0 or
later (older ones lack it).
*/}}
{{- define "diskplane.windows.pipes" -}}
disk-v1: \\.\pipe\csi-proxy-disk-v1
volume-v1: \\.\pipe\csi-proxy-volume-v1
filesystem-v1: \\.\pipe\csi-proxy-filesystem-v1
volume-v2alpha1: \\.\pipe\csi-proxy-volume-v2alpha1
{{- end -}}

{{/*
CEL: a host path as Windows compares pipe paths: blanks at either end
dropped, ASCII letters in lower case, / as \. The argument is the CEL
expression of the path.
*/}}
{{- define "diskplane.windows.pipePath" -}}
{{ . }}.trim().lowerAscii().replace('/', '\\')
{{- end -}}

{{/*
CEL: whether a path made by diskplane.windows.pipePath (the argument names
it) is one of csi-proxy's pipes or may resolve to one, however it is spelt.
Windows resolves ".", ".." and repeated separators in \\.\ paths, skips
that for \\?\ ones, reaches pipes by UNC (\\host\pipe\…) and by NT names
(\??\, \Device\NamedPipe, GLOBALROOT), and compares pipe names
regardless of case. Rather than resolve all that, the test denies on doubt:
a path that names csi-proxy anywhere, or one in the device, UNC or NT
namespaces that is not plainly \\.\pipe\<one ASCII name>.
*/}}
{{- define "diskplane.windows.isPipe" -}}
({{ . }}.contains('csi-proxy')
|| ({{ . }}.matches(r'^\\\\|^\\(\?\?|device|globalroot|dosdevices|global\?\?)(\\|$)')
&& !{{ . }}.matches(r'^\\\\\.\\pipe\\[a-z0-9_][a-z0-9_.@+=-]*$')))
{{- end -}}
