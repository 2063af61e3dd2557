#!/usr/bin/env bash
# Real-cluster run of gpu-sizer on kind: the chart from this working tree, the examples applied
# with measurement disabled, then the end-to-end suite (tests/e2e) against the cluster.
#
# NEEDS DOCKER. It does not run on machines without Docker (this project's CI and development
# machines have none; there the chart is tested offline with Helm's Go SDK in tests/chart and the
# e2e suite runs against kmock's emulated API). Also needs on PATH: kind (0.20+), kubectl
# (1.27+), helm (3.10+ or 4), and a Python with this project installed (default: .venv/bin/python,
# else python3) for `gpu-sizer estimate` and pytest.
#
# What it does:
#   1. creates a kind cluster (one control plane, two workers);
#   2. makes the workers look like GPU nodes of two classes: NVIDIA GPU Feature Discovery labels
#      (nvidia.com/gpu.product, .memory in MiB, .count) for an L4 (24 GB) and an H100 80GB, and
#      one nvidia.com/gpu of extended-resource capacity each (so the scheduler can place
#      measurement pods; no GPU, no driver: measurement stays disabled);
#   3. builds the operator image from this tree, loads it into kind, installs charts/gpu-sizer
#      (self-signed webhook TLS) and waits until the operator has patched the webhooks' caBundle;
#   4. applies every examples/*.yaml with spec.measurement.mode=Disabled: a workload that
#      `gpu-sizer estimate` says fits must become Ready; one it says has no safe headroom must be
#      denied by the admission webhook at apply time;
#   5. runs `pytest tests/e2e` with GPU_SIZER_E2E_KUBECONFIG set to the cluster, first served by
#      the chart's operator (GPU_SIZER_E2E_OPERATOR=installed), then, after `helm uninstall` (the
#      CRD stays), by the operator the suite starts per test (hack/e2e-real-cluster.md);
#   6. deletes the cluster (KEEP_CLUSTER=1 keeps it for a look around).
#
# Settings (environment): CLUSTER_NAME (gpu-sizer-e2e), KIND_NODE_IMAGE (kind's default),
# OPERATOR_DOCKERFILE (Dockerfile), IMAGE (gpu-sizer:e2e), PYTHON, KEEP_CLUSTER, PYTEST_ARGS.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
CLUSTER_NAME=${CLUSTER_NAME:-gpu-sizer-e2e}
IMAGE=${IMAGE:-gpu-sizer:e2e}
OPERATOR_DOCKERFILE=${OPERATOR_DOCKERFILE:-Dockerfile}
RELEASE=gpu-sizer
NAMESPACE=gpu-sizer
KUBECONFIG_FILE=${KUBECONFIG_FILE:-$ROOT/.kind-$CLUSTER_NAME.kubeconfig}
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

log() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'kind-e2e: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH (this script needs Docker, kind, kubectl and helm)"
done
docker info >/dev/null 2>&1 || die "Docker is not running or not reachable; this script cannot run without it"
[[ -f "$OPERATOR_DOCKERFILE" ]] || die "no $OPERATOR_DOCKERFILE here; set OPERATOR_DOCKERFILE to the operator image's Dockerfile"
PYTHONPATH=operator "$PYTHON" -c 'import gpu_sizer, yaml, pytest' \
  || die "$PYTHON cannot import gpu_sizer, yaml and pytest; install the project (see README) or set PYTHON"

export KUBECONFIG=$KUBECONFIG_FILE
kc() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }

cleanup() {
  if [[ "${KEEP_CLUSTER:-0}" == 1 ]]; then
    log "keeping cluster $CLUSTER_NAME (kubeconfig: $KUBECONFIG_FILE); delete with: kind delete cluster --name $CLUSTER_NAME"
  else
    log "deleting cluster $CLUSTER_NAME"
    kind delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
    rm -f "$KUBECONFIG_FILE"
  fi
}

log "creating kind cluster $CLUSTER_NAME"
kind delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
kind create cluster --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG_FILE" --wait 120s \
  ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --config - <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
trap cleanup EXIT

log "labelling the workers as GPU nodes of two classes (GPU Feature Discovery labels)"
mapfile -t WORKERS < <(kc get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort)
[[ ${#WORKERS[@]} -ge 2 ]] || die "expected two worker nodes, got: ${WORKERS[*]}"
# product label, memory in MiB as GFD reports it (NVML total), count
label_gpu_node() {
  local node=$1 product=$2 memory_mib=$3
  kc label node "$node" --overwrite \
    nvidia.com/gpu.present=true \
    "nvidia.com/gpu.product=$product" \
    "nvidia.com/gpu.memory=$memory_mib" \
    nvidia.com/gpu.count=1
  # Advertise one nvidia.com/gpu as an extended resource (Kubernetes docs: "Advertise Extended
  # Resources for a Node"); the kubelet keeps capacity it does not manage.
  kc patch node "$node" --subresource=status --type=json \
    -p '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"}]'
}
label_gpu_node "${WORKERS[0]}" NVIDIA-L4 23034
label_gpu_node "${WORKERS[1]}" NVIDIA-H100-80GB-HBM3 81559

log "building $IMAGE from $OPERATOR_DOCKERFILE and loading it into kind"
docker build -t "$IMAGE" -f "$OPERATOR_DOCKERFILE" .
kind load docker-image "$IMAGE" --name "$CLUSTER_NAME"

log "installing charts/gpu-sizer from this working tree"
helm upgrade --install "$RELEASE" charts/gpu-sizer --kubeconfig "$KUBECONFIG_FILE" \
  --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --wait --timeout 5m
kc -n "$NAMESPACE" rollout status "deployment/$RELEASE" --timeout=180s

log "waiting for the operator to patch the webhooks' caBundle (self-signed TLS)"
for _ in $(seq 1 60); do
  bundle=$(kc get validatingwebhookconfiguration "$RELEASE-webhook" -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
  [[ -n "$bundle" ]] && break
  sleep 2
done
[[ -n "$bundle" ]] || { kc -n "$NAMESPACE" logs "deployment/$RELEASE" --tail=100 >&2; die "caBundle still empty after 120 s"; }

log "applying examples/ with measurement disabled"
# Prints the example with spec.measurement.mode=Disabled, and its namespace and name on stderr.
without_measurement() {
  PYTHONPATH=operator "$PYTHON" - "$1" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["spec"].setdefault("measurement", {})["mode"] = "Disabled"
print(doc["metadata"].get("namespace", "default"), doc["metadata"]["name"], file=sys.stderr)
yaml.safe_dump(doc, sys.stdout, sort_keys=False)
EOF
}
failures=0
target=$(mktemp)
shopt -s nullglob
examples=(examples/*.yaml)
[[ ${#examples[@]} -gt 0 ]] || die "no examples/*.yaml in this tree"
for file in "${examples[@]}"; do
  manifest=$(without_measurement "$file" 2>"$target")
  read -r ns name <"$target"
  kc create namespace "$ns" --dry-run=client -o yaml | kc apply -f - >/dev/null
  set +e
  PYTHONPATH=operator "$PYTHON" -m gpu_sizer.cli estimate "$file" >/dev/null 2>&1
  verdict=$?
  output=$(printf '%s\n' "$manifest" | kc apply -f - 2>&1)
  applied=$?
  set -e
  if [[ $verdict -eq 0 ]]; then
    if [[ $applied -ne 0 ]]; then
      echo "FAIL $file: fits offline but the API refused it: $output" >&2; failures=$((failures + 1)); continue
    fi
    if kc wait -n "$ns" --for=condition=Ready "gpuworkload/$name" --timeout=120s >/dev/null; then
      echo "ok   $file: Ready, $(kc get -n "$ns" "gpuworkload/$name" -o jsonpath='{.status.recommendation.gpuCount} x {.status.recommendation.gpuClass}')"
    else
      echo "FAIL $file: not Ready within 120 s:" >&2
      kc get -n "$ns" "gpuworkload/$name" -o jsonpath='{.status}' >&2; echo >&2
      failures=$((failures + 1))
    fi
  else
    if [[ $applied -ne 0 && "$output" == *denied* ]]; then
      echo "ok   $file: denied at apply time as expected"
    else
      echo "FAIL $file: gpu-sizer estimate exits $verdict but apply gave: $output" >&2
      failures=$((failures + 1))
    fi
  fi
done
[[ $failures -eq 0 ]] || die "$failures example(s) failed"

log "running the end-to-end suite against the cluster, served by the chart's operator"
# The chart's operator serves every namespace, so the suite must not start a second one.
GPU_SIZER_E2E_KUBECONFIG=$KUBECONFIG_FILE GPU_SIZER_E2E_OPERATOR=installed PYTHONPATH=operator:. \
  "$PYTHON" -m pytest tests/e2e -q -rs ${PYTEST_ARGS:-}

log "uninstalling the chart (its CRD stays) and running the suite with the operator it starts"
# Covers what needs the operator process in hand: SIGKILL and restart, the local backend.
helm uninstall "$RELEASE" --kubeconfig "$KUBECONFIG_FILE" --namespace "$NAMESPACE" --wait
GPU_SIZER_E2E_KUBECONFIG=$KUBECONFIG_FILE PYTHONPATH=operator:. \
  "$PYTHON" -m pytest tests/e2e -q -rs ${PYTEST_ARGS:-}
log "kind e2e passed"
