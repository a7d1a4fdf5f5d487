#!/usr/bin/env bash
# The integration suite against a kind cluster: for users with Docker. This machine
# class (no Docker engine) cannot run it; `make test` runs the same suite on the
# local process-node cluster instead.
#
# What it does: creates a kind cluster (KIND_CLUSTER, default kinetic-e2e), builds
# the runner and operator images from docker/*.Dockerfile and loads them, runs
# fake-gcs-server in the cluster as the gs:// backend, installs the CRDs and the
# chart, then runs tests/integration with KUBECONFIG pointing at kind.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cluster="${KIND_CLUSTER:-kinetic-e2e}"
tag="${KINETIC_E2E_TAG:-e2e}"
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

docker build -f docker/runner.Dockerfile -t "kinetic-runner:$tag" .
docker build -f docker/operator.Dockerfile -t "kinetic-operator:$tag" .
kind load docker-image --name "$cluster" "kinetic-runner:$tag" "kinetic-operator:$tag"

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
.venv/bin/python - "$tag" <<'PY'
import asyncio, os, sys
import helm_sdkpy as helm
tag = sys.argv[1]
values = {
    "image": {"repository": "kinetic-operator", "tag": tag, "pullPolicy": "Never"},
    "defaultJobImage": f"kinetic-runner:{tag}",
    "storageRoot": "gs://kinetic",
    "extraEnv": [{"name": "STORAGE_EMULATOR_HOST", "value": "http://fake-gcs.kinetic-system:4443"}],
}
config = helm.Configuration(namespace="kinetic-system", kubeconfig=os.environ["KUBECONFIG"])
asyncio.run(helm.Upgrade(config).run("kinetic", "helm/kinetic", values=values, install=True, wait=True))
PY

export STORAGE_EMULATOR_HOST=http://127.0.0.1:4443 KINETIC_STORAGE_ROOT=gs://kinetic
export KINETIC_TEST_OPERATOR=external
.venv/bin/python -m pytest tests/integration -q "$@"
