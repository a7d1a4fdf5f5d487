{{- /*
How many operator Pods the Deployment runs: one today (two Kopf peers of equal
priority would freeze). The PodDisruptionBudget reads the same number, so the
two cannot disagree when leader election lets it grow (operator.replicas).
*/ -}}
{{- define "kinetic.operatorReplicas" -}}
{{- .Values.operator.replicas | default 1 | int -}}
{{- end -}}

{{- /* The operator's Pods: what the Deployment, its Services and its policies select. */ -}}
{{- define "kinetic.operatorSelector" -}}
app.kubernetes.io/name: kinetic
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
