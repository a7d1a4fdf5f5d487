{{- /*
What the operator needs in every namespace it watches: granted by the ClusterRole
when it watches all of them, by a Role in each when watchNamespaces is set.
*/ -}}
{{- define "kinetic.namespacedRules" }}
  - apiGroups: [kinetic.dev]
    resources: [kineticjobs, kineticbatches]
    verbs: [get, list, watch]
  - apiGroups: [kinetic.dev]
    resources: [kineticjobs/status, kineticbatches/status]
    verbs: [patch]
  # Owner references with blockOwnerDeletion (attempt Pods of a job or a batch)
  # need this where OwnerReferencesPermissionEnforcement is on.
  - apiGroups: [kinetic.dev]
    resources: [kineticjobs/finalizers, kineticbatches/finalizers]
    verbs: [update]
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch, create, delete]
  - apiGroups: [""]
    resources: [pods/log]
    verbs: [get]
  - apiGroups: ["", events.k8s.io]
    resources: [events]
    verbs: [create]
  # The runner ServiceAccount (runnerServiceAccount) job pods run as: created in a
  # namespace on first use, never changed; it is granted nothing and has no token.
  - apiGroups: [""]
    resources: [serviceaccounts]
    verbs: [get, create]
  # A multi-host job's headless Service (<owner>-gang): its members' DNS names, and its
  # NetworkPolicy: only Pods of the namespace reach the members. Created with the first
  # gang and owned by its KineticJob or KineticBatch, which deletes them; read only to
  # tell its own from one someone else made under the name first.
  - apiGroups: [""]
    resources: [services]
    verbs: [get, create]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, create]
{{- end }}
{{- define "kinetic.clusterRules" }}
  # Whether the cluster has the GCS FUSE CSI driver (CSIDriver gcsfuse.csi.storage.gke.io):
  # read, only for specs with a fuse data volume, to mount them or refuse them by name.
  # Cluster-scoped, so the ClusterRole grants it whatever watchNamespaces says.
  - apiGroups: [storage.k8s.io]
    resources: [csidrivers]
    verbs: [get, list]
{{- end }}
