{{- define "kinetic.labels" -}}
app.kubernetes.io/name: kinetic
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kinetic.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "kinetic.operatorName" -}}
kinetic-operator
{{- end -}}

{{- define "kinetic.runnerImage" -}}
{{ .Values.runnerImage.repository }}:{{ .Values.runnerImage.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "kinetic.defaultJobImage" -}}
{{- if .Values.defaultJobImage -}}
{{ .Values.defaultJobImage }}
{{- else -}}
{{ include "kinetic.runnerImage" . }}-py{{ first .Values.runnerImage.pythonVersions }}
{{- end -}}
{{- end -}}
