{{- /*
How many operator Pods the Deployment runs (operator.replicas): two by default,
one leading by the Lease and one on standby. The PodDisruptionBudget reads the
same number, so the two cannot disagree.
*/ -}}
{{- define "kinetic.operatorReplicas" -}}
{{- .Values.operator.replicas | default 2 | int -}}
{{- end -}}

{{- /* The operator's Pods: what the Deployment, its Services and its policies select. */ -}}
{{- define "kinetic.operatorSelector" -}}
app.kubernetes.io/name: kinetic
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
