#!/usr/bin/env bash
# runp as a node of a real cluster: starts the test control plane (../shared/k8s) in a temp
# dir, runs `runp agent --runtime=process --kubeconfig <node identity>`, waits for the Node
# Ready, runs a Deployment of 3 busybox replicas on it, shows nodes and pods (Running, pod
# IPs), deletes the Deployment and waits for the pods to go, then stops agent and control
# plane. Every wait is bounded; on failure the agent's log tail is printed and all is cleaned.
# Usage: sudo scripts/run-cluster-sample.sh
#   RUNP_K8S_DIR  control plane folder (default: <project>/../shared/k8s)
#   RUNP_BIN      runp binary (default: target/release/runp, else target/debug/runp, else built)
#   TIMEOUT       seconds per wait (default 90)
set -euo pipefail
cd "$(dirname "$0")/.."
project=$PWD
k8s_dir=${RUNP_K8S_DIR:-$project/../shared/k8s}
timeout=${TIMEOUT:-90}
node=runp-sample
[ "$(id -u)" -eq 0 ] || { echo "run-cluster-sample: needs root (the process runtime)" >&2; exit 1; }
[ -f "$k8s_dir/start-cluster.sh" ] || { echo "run-cluster-sample: no control plane at $k8s_dir (set RUNP_K8S_DIR)" >&2; exit 1; }

if [ -n "${RUNP_BIN:-}" ]; then runp_bin=$RUNP_BIN
elif [ -x target/release/runp ]; then runp_bin=target/release/runp
elif [ -x target/debug/runp ]; then runp_bin=target/debug/runp
else cargo build --release --quiet; runp_bin=target/release/runp
fi
runp_bin=$(realpath "$runp_bin")
scripts/build-fixtures.sh

tmp=$(mktemp -d /tmp/runp-cluster-sample.XXXXXX)
root=$tmp/root
agent=
cluster_started=
log() { echo "== $*"; }
k() { kubectl --kubeconfig "$K8S_ADMIN_KUBECONFIG" --request-timeout=15s "$@"; }

cleanup() {
  local rc=$?
  trap - EXIT
  if [ "$rc" -ne 0 ]; then
    echo "run-cluster-sample: FAILED (exit $rc); agent log tail ($root/agent.log):" >&2
    tail -n 40 "$root/agent.log" 2>/dev/null >&2 || true
  fi
  if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
    # Pods outlive a stopped agent (as with kubelet): remove them through it first.
    if [ -n "$cluster_started" ]; then
      k delete deployment sample --ignore-not-found --wait=false >/dev/null 2>&1 || true
      k wait --for=delete pod -l app=sample --timeout=30s >/dev/null 2>&1 || true
    fi
    kill -TERM "$agent" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$agent" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$agent" 2>/dev/null || true
    wait "$agent" 2>/dev/null || true
  fi
  if [ -n "$cluster_started" ]; then
    bash "$k8s_dir/stop-cluster.sh" "$tmp/k8s" >/dev/null 2>&1 || true
  fi
  if [ "$rc" -eq 0 ]; then
    rm -rf "$tmp"
  else
    echo "run-cluster-sample: state kept in $tmp" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits until `cmd` succeeds (at most $timeout s); names what it waited for on failure.
wait_until() {
  local what=$1; shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$agent" ] && ! kill -0 "$agent" 2>/dev/null; then
      echo "run-cluster-sample: the agent exited while waiting for $what" >&2; return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "run-cluster-sample: timed out after ${timeout}s waiting for $what" >&2; return 1
    fi
    sleep 1
  done
}

log "starting the control plane in $tmp/k8s"
mkdir -p "$tmp/k8s" "$root"
cluster_started=1
NODE_NAME=$node K8S_BIN_CACHE=${K8S_BIN_CACHE:-/tmp/runp-k8s-bin-cache} \
  bash "$k8s_dir/start-cluster.sh" "$tmp/k8s" >"$tmp/start-cluster.log" 2>&1 \
  || { cat "$tmp/start-cluster.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$tmp/k8s/env"

log "loading busybox into the node's image store"
"$runp_bin" --root "$root" image load rootfs-fixtures/build/busybox-oci.tar >/dev/null

log "starting runp agent as node $node (log: $root/agent.log)"
# The kubelet API (kubectl logs/exec) on a free loopback port; the API server's kubelet
# client certificate is signed by the cluster CA.
kubelet_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$runp_bin" --root "$root" agent --runtime=process --kubeconfig "$K8S_NODE_KUBECONFIG" \
  --node-name "$node" --node-ip 127.0.0.1 --address 127.0.0.1 --kubelet-port "$kubelet_port" \
  --client-ca-file "$K8S_CA" >"$root/agent.log" 2>&1 &
agent=$!
wait_until "node $node Ready" k wait --for=condition=Ready "node/$node" --timeout=5s

log "applying a Deployment of 3 busybox replicas"
k apply -f - <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: sample, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: sample}}
  template:
    metadata: {labels: {app: sample}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: busybox
        imagePullPolicy: IfNotPresent
        command: [sh, -c, 'echo "started on $(hostname)"; exec sleep 3600']
EOF
running() {
  [ "$(k get pods -l app=sample --field-selector=status.phase=Running -o name | wc -l)" -eq 3 ]
}
wait_until "3 sample pods Running" running

log "kubectl get nodes"
k get nodes -o wide
log "kubectl get pods -o wide"
k get pods -o wide
ips=$(k get pods -l app=sample -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}' | grep -c .)
[ "$ips" -eq 3 ] || { echo "run-cluster-sample: $ips of 3 pods have a pod IP" >&2; exit 1; }

pod=$(k get pods -l app=sample -o jsonpath='{.items[0].metadata.name}')
log "kubectl logs $pod"
k logs "$pod" | tee "$tmp/logs.out"
grep -q "started on $pod" "$tmp/logs.out" || { echo "run-cluster-sample: no log line from $pod" >&2; exit 1; }
log "kubectl exec $pod -- sh -c 'echo hello from \$(hostname)'"
k exec "$pod" -- sh -c 'echo hello from $(hostname)' | tee "$tmp/exec.out"
grep -q "hello from $pod" "$tmp/exec.out" || { echo "run-cluster-sample: exec failed in $pod" >&2; exit 1; }

log "deleting the Deployment"
k delete deployment sample --wait=false
gone() { [ -z "$(k get pods -l app=sample -o name)" ]; }
wait_until "the sample pods to be gone" gone
k get pods
log "done: the pods ran on runp and are gone; stopping agent and control plane"
