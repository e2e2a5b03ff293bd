{{- define "dralab-driver.name" -}}{{ .Chart.Name }}{{- end -}}

{{- define "dralab-driver.labels" -}}
app.kubernetes.io/name: {{ include "dralab-driver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: dralab
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "dralab-driver.selector" -}}
app.kubernetes.io/name: {{ include "dralab-driver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dralab-driver.serviceAccount" -}}{{ .Release.Name }}-{{ include "dralab-driver.name" . }}{{- end -}}

{{- define "dralab-driver.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}

{{- /* The kubelet's plugin registration directory: the kubelet watches it for the driver's registration socket. */ -}}
{{- define "dralab-driver.registrarDir" -}}{{ .Values.kubeletDir }}/plugins_registry{{- end -}}

{{- /* The driver's own socket directory, the only one under the kubelet's plugins. */ -}}
{{- define "dralab-driver.pluginDir" -}}{{ .Values.kubeletDir }}/plugins/{{ include "dralab-driver.driverName" . }}{{- end -}}

{{- /* The kubelet's device-plugin directory is fixed (k8s.io/kubelet's DevicePluginPath): it does not move with the kubelet's root directory. */ -}}
{{- define "dralab-driver.devicePluginsDir" -}}/var/lib/kubelet/device-plugins{{- end -}}

{{- /* The DRA driver's name: driverName, else that of the driver the release runs. */ -}}
{{- define "dralab-driver.driverName" -}}{{ .Values.driverName | default (ternary "nic.dralab.dev" "gpu.dralab.dev" (eq .Values.driver "nic")) }}{{- end -}}

{{- /* The host directory of the driver's checkpoint: one per driver, so that a GPU and a NIC release on one node keep theirs apart. */ -}}
{{- define "dralab-driver.checkpointDir" -}}{{ .Values.checkpointDir | default (ternary "/var/lib/dralab-nic-driver" "/var/lib/dralab-driver" (eq .Values.driver "nic")) }}{{- end -}}

{{/* "true" where the driver's NVML inventory reads real GPUs (not a mock server), whose device files it opens. */}}
{{- define "dralab-driver.nvmlDevices" -}}{{ if and (eq .Values.inventory "nvml") (eq .Values.nvml.source "library") }}true{{ end }}{{- end -}}
