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
