#!/usr/bin/env bash
# A kind cluster with four fake-GPU workers running Muster, for the end-to-end suites:
#   1. creates the cluster from e2e/kind/cluster.yaml (kubeconfig in target/),
#   2. builds the operator and node-agent images (docker/*.Dockerfile) and loads them into kind,
#   3. installs charts/muster with charts/muster/ci/kind-values.yaml (node agent in fixture mode),
#   4. waits for a GpuNode per worker, and prints the variables the suites read.
# Needs docker (with buildx), kind, kubectl and helm. Re-running reuses an existing cluster.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
name=${KIND_CLUSTER_NAME:-muster-e2e}
tag=${TAG:-e2e}
kubeconfig=${KUBECONFIG_OUT:-$root/target/kind-$name.kubeconfig}
mkdir -p "$(dirname "$kubeconfig")"

if ! kind get clusters 2>/dev/null | grep -qx "$name"; then
  kind create cluster --name "$name" --config e2e/kind/cluster.yaml --kubeconfig "$kubeconfig" --wait 180s
else
  kind get kubeconfig --name "$name" > "$kubeconfig"
fi
export KUBECONFIG=$kubeconfig

for component in operator node-agent; do
  image=ghcr.io/muster-dev/muster-$component:$tag
  docker buildx build --load -f "docker/$component.Dockerfile" -t "$image" .
  kind load docker-image --name "$name" "$image"
done

helm upgrade --install muster charts/muster -n muster-system --create-namespace \
  -f charts/muster/ci/kind-values.yaml \
  --set operator.image.tag="$tag" --set nodeAgent.image.tag="$tag" \
  --wait --timeout 5m

workers=$(kubectl get nodes -l muster.dev/fake-gpu=true --no-headers | wc -l)
for _ in $(seq 60); do
  have=$(kubectl get gpunodes --no-headers 2>/dev/null | wc -l)
  [ "$have" -ge "$workers" ] && break
  sleep 5
done
kubectl get nodes -L muster.dev/leaf,muster.dev/gpu.product,muster.dev/gpu.count
kubectl get gpunodes

cat <<MSG

Run the suites against it:
  export MUSTER_E2E_KUBECONFIG=$kubeconfig
  export MUSTER_E2E_FAIL_NODE_CMD='docker stop {node}'
  export MUSTER_E2E_RECOVER_NODE_CMD='docker start {node}'
  cargo test -p muster-e2e
Delete it: kind delete cluster --name $name
MSG
