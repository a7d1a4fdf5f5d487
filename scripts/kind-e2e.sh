#!/usr/bin/env bash
# The integration suite against a kind cluster: for users with Docker and kind (kind
# cannot be fetched on the machines this project is developed on; `make test` runs the
# same suite on the local cluster's real node instead).
#
# What it does: creates a kind cluster (KIND_CLUSTER, default kinetic-e2e), builds the
# runner and operator images with the same build as the local cluster (`kinetic local
# images`: docker/*.Dockerfile, the wheelhouse, this interpreter's Python in the runner)
# with the machine's Docker Engine, loads them, runs fake-gcs-server in the cluster as the
# gs:// backend, installs the CRDs and the chart, then runs tests/integration with
# KUBECONFIG pointing at kind.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cluster="${KIND_CLUSTER:-kinetic-e2e}"
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 2; }
done
if ! docker info >/dev/null 2>&1; then
  echo "kind-e2e: no Docker engine answers (docker info failed); kind needs one." >&2
  echo "kind-e2e: on a machine without Docker, use \`make test\` (the local cluster)." >&2
  exit 2
fi

kubeconfig="$(mktemp)"
trap 'rm -f "$kubeconfig"' EXIT
kind get clusters | grep -qx "$cluster" || kind create cluster --name "$cluster" --wait 120s
kind get kubeconfig --name "$cluster" > "$kubeconfig"
export KUBECONFIG="$kubeconfig"

docker_host="${DOCKER_HOST:-unix:///var/run/docker.sock}"
built=$(.venv/bin/kinetic local images --docker-host "$docker_host")
image() { python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$built" "$1"; }
kind load docker-image --name "$cluster" "$(image runnerImage)" "$(image operatorImage)"

# fake-gcs-server as the cluster's gs:// storage, reachable from pods and (port-forwarded) from here.
kubectl create namespace kinetic-system --dry-run=client -o yaml | kubectl apply -f -
kubectl -n kinetic-system apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: fake-gcs}
spec:
  selector: {matchLabels: {app: fake-gcs}}
  template:
    metadata: {labels: {app: fake-gcs}}
    spec:
      containers:
        - name: gcs
          image: fsouza/fake-gcs-server:1.49
          args: [-scheme, http, -port, "4443", -public-host, "fake-gcs.kinetic-system:4443"]
          ports: [{containerPort: 4443}]
---
apiVersion: v1
kind: Service
metadata: {name: fake-gcs}
spec:
  selector: {app: fake-gcs}
  ports: [{port: 4443, targetPort: 4443}]
YAML
kubectl -n kinetic-system rollout status deploy/fake-gcs --timeout=180s
kubectl -n kinetic-system port-forward svc/fake-gcs 4443:4443 >/dev/null 2>&1 &
forward=$!
trap 'kill $forward 2>/dev/null; rm -f "$kubeconfig"' EXIT
sleep 2
curl -sf -X POST -H 'Content-Type: application/json' -d '{"name":"kinetic"}' \
  http://127.0.0.1:4443/storage/v1/b >/dev/null || true

kubectl apply -f helm/kinetic/crds
.venv/bin/python - "$built" <<'PY'
import asyncio, json, os, sys
import helm_sdkpy as helm
built = json.loads(sys.argv[1])
repository, tag = built["operatorImage"].rsplit(":", 1)
values = {
    "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
    "runnerImage": {
        "repository": built["runnerRepository"],
        "tag": built["runnerTag"],
        "pythonVersions": [built["python"]],
    },
    "storageRoot": "gs://kinetic",
    "storageEmulatorHost": "http://fake-gcs.kinetic-system:4443",
}
config = helm.Configuration(namespace="kinetic-system", kubeconfig=os.environ["KUBECONFIG"])
asyncio.run(helm.Upgrade(config).run("kinetic", "helm/kinetic", values=values, install=True, wait=True))
PY

export STORAGE_EMULATOR_HOST=http://127.0.0.1:4443 KINETIC_STORAGE_ROOT=gs://kinetic
export KINETIC_TEST_OPERATOR=external
.venv/bin/python -m pytest tests/integration -q "$@"
