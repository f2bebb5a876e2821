#!/usr/bin/env bash
# Pods through the API vs through manifests, in one run on a real control plane (../shared/k8s):
#  * API: `runp agent --kubeconfig` as node bench-node; a Deployment scaled 0 -> N; seconds
#    until all N are Running in the API (then scaled to 0 and waited for).
#  * manifests: a standalone `runp agent --manifests DIR` (already running, DIR empty); N pod
#    manifests copied in; seconds until `runp pods` shows all N Running (then removed).
# Medians over BENCH_RUNS runs and their ratio (goal <= 1.3x); with N API pods running: the
# agent's CPU (utime+stime of its process, /proc/PID/stat) and RSS (VmRSS) over IDLE seconds,
# and the node's API requests per minute at idle, counted from the apiserver's audit log
# (user system:node:bench-node; by resource).
# Usage: sudo scripts/bench-cluster.sh
#   BENCH_PODS (100) BENCH_RUNS (3) IDLE (30 s) SETTLE (30 s before IDLE) TIMEOUT (300 s per
#   wait) RUNP_K8S_DIR RUNP_BIN
#   (KUBE_CONTROLLER_MANAGER_EXTRA_ARGS="--kube-api-qps=100 --kube-api-burst=200" takes the
#   controller-manager's default 20 QPS client limit out of the API figure.)
set -euo pipefail
cd "$(dirname "$0")/.."
project=$PWD
k8s_dir=${RUNP_K8S_DIR:-$project/../shared/k8s}
pods=${BENCH_PODS:-100}
runs=${BENCH_RUNS:-3}
idle=${IDLE:-30}
settle=${SETTLE:-30}
timeout=${TIMEOUT:-300}
node=bench-node
[ "$(id -u)" -eq 0 ] || { echo "bench-cluster: needs root (the process runtime)" >&2; exit 1; }
[ -f "$k8s_dir/start-cluster.sh" ] || { echo "bench-cluster: no control plane at $k8s_dir" >&2; exit 1; }
if [ -n "${RUNP_BIN:-}" ]; then runp_bin=$RUNP_BIN
elif [ -x target/release/runp ]; then runp_bin=target/release/runp
else cargo build --release --quiet; runp_bin=target/release/runp
fi
runp_bin=$(realpath "$runp_bin")
scripts/build-fixtures.sh

tmp=$(mktemp -d /tmp/runp-bench-cluster.XXXXXX)
api_root=$tmp/api-root
man_root=$tmp/man-root
agent=
agent_log=
cluster_started=
say() { echo "== $*" >&2; }
k() { kubectl --kubeconfig "$K8S_ADMIN_KUBECONFIG" --request-timeout=30s "$@"; }

stop_agent() {
  [ -n "$agent" ] || return 0
  kill -TERM "$agent" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$agent" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$agent" 2>/dev/null || true
  wait "$agent" 2>/dev/null || true
  agent=
}
cleanup() {
  local rc=$?
  trap - EXIT
  if [ "$rc" -ne 0 ]; then
    echo "bench-cluster: FAILED (exit $rc); agent log tail ($agent_log):" >&2
    tail -n 30 "$agent_log" 2>/dev/null >&2 || true
  fi
  # Pods outlive a stopped agent: remove them through it first.
  if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null; then
    rm -f "$tmp/manifests/"*.yaml 2>/dev/null || true
    if [ -n "$cluster_started" ]; then
      k delete deployment bench --ignore-not-found --wait=false >/dev/null 2>&1 || true
      k wait --for=delete pod -l app=bench --timeout=120s >/dev/null 2>&1 || true
    fi
    for _ in $(seq 1 120); do
      [ "$("$runp_bin" --root "$man_root" pods 2>/dev/null | grep -c bench-)" -eq 0 ] && break
      sleep 1
    done
  fi
  stop_agent
  [ -z "$cluster_started" ] || bash "$k8s_dir/stop-cluster.sh" "$tmp/k8s" >/dev/null 2>&1 || true
  if [ "$rc" -eq 0 ]; then rm -rf "$tmp"; else echo "bench-cluster: state kept in $tmp" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_until() {
  local what=$1; shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$agent" ] && ! kill -0 "$agent" 2>/dev/null; then
      echo "bench-cluster: the agent exited while waiting for $what" >&2; return 1
    fi
    [ "$SECONDS" -lt "$deadline" ] || { echo "bench-cluster: timed out (${timeout}s): $what" >&2; return 1; }
    sleep 0.2
  done
}
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# The control plane with an audit log of every request (metadata only, one event per request).
say "control plane (audit log on) in $tmp/k8s"
mkdir -p "$tmp/k8s" "$api_root" "$man_root" "$tmp/manifests"
cat >"$tmp/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
EOF
cluster_started=1
NODE_NAME=$node K8S_BIN_CACHE=${K8S_BIN_CACHE:-/tmp/runp-k8s-bin-cache} \
  KUBE_APISERVER_EXTRA_ARGS="--audit-log-path=$tmp/audit.log --audit-policy-file=$tmp/audit-policy.yaml --max-requests-inflight=800" \
  bash "$k8s_dir/start-cluster.sh" "$tmp/k8s" >"$tmp/start-cluster.log" 2>&1 \
  || { cat "$tmp/start-cluster.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$tmp/k8s/env"
for root in "$api_root" "$man_root"; do
  "$runp_bin" --root "$root" image load rootfs-fixtures/build/busybox-oci.tar >/dev/null 2>&1
done

# --- through the API ---------------------------------------------------------------------
agent_log=$api_root/agent.log
"$runp_bin" --root "$api_root" agent --runtime=process --kubeconfig "$K8S_NODE_KUBECONFIG" \
  --node-name "$node" --node-ip 127.0.0.1 --max-pods $((pods + 20)) --listen none \
  >"$agent_log" 2>&1 &
agent=$!
wait_until "node $node Ready" k wait --for=condition=Ready "node/$node" --timeout=5s
k apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: bench, namespace: default}
spec:
  replicas: 0
  selector: {matchLabels: {app: bench}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      terminationGracePeriodSeconds: 1
      automountServiceAccountToken: false
      enableServiceLinks: false
      containers:
      - name: main
        image: busybox
        imagePullPolicy: IfNotPresent
        command: [sleep, "3600"]
EOF
api_running() {
  [ "$(k get pods -l app=bench --field-selector=status.phase=Running -o name | wc -l)" -eq "$1" ]
}
api_gone() { [ -z "$(k get pods -l app=bench -o name)" ]; }
api_times=()
for run in $(seq 1 "$runs"); do
  t0=$(now)
  k scale deployment bench --replicas="$pods" >/dev/null
  wait_until "$pods API pods Running (run $run)" api_running "$pods"
  t=$(printf "%.2f" "$(echo "$(now) - $t0" | bc)")
  api_times+=("$t")
  say "API run $run: $pods pods Running in ${t}s"
  if [ "$run" -eq "$runs" ]; then
    # Idle with N pods: agent CPU and RSS, and the node's API requests. Statuses and events
    # of the last starts settle for a while after Running (measured: ~30 % of a core in the
    # first 20 s, ~4 % after 30 s with 50 pods): SETTLE seconds pass first.
    sleep "$settle"
    hz=$(getconf CLK_TCK)
    ticks() { awk '{print $14 + $15}' "/proc/$agent/stat"; }
    c0=$(ticks); a0=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
    rss_max=0
    for _ in $(seq 1 "$idle"); do
      r=$(awk '/VmRSS/ {print $2}' "/proc/$agent/status")
      [ "$r" -le "$rss_max" ] || rss_max=$r
      sleep 1
    done
    c1=$(ticks); a1=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
    cpu_pct=$(echo "scale=2; ($c1 - $c0) * 100 / $hz / $idle" | bc)
    rss_mib=$(echo "scale=1; $rss_max / 1024" | bc)
    requests=$(python3 - "$tmp/audit.log" "system:node:$node" "$a0" "$a1" "$idle" <<'EOF'
import json, sys, collections
path, user, start, end, secs = sys.argv[1:6]
by = collections.Counter()
for line in open(path):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("user", {}).get("username") != user:
        continue
    t = e.get("requestReceivedTimestamp", "")
    if not (start[:26] <= t[:26] <= end[:26]):
        continue
    ref = e.get("objectRef", {})
    by[f'{e.get("verb")} {ref.get("resource", "?")}{"/" + ref["subresource"] if ref.get("subresource") else ""}'] += 1
total = sum(by.values())
per_min = total * 60 / float(secs)
detail = ", ".join(f"{k} {v}" for k, v in by.most_common())
print(f"{per_min:.1f}|{detail or 'none'}")
EOF
)
  fi
  k scale deployment bench --replicas=0 >/dev/null
  wait_until "API pods gone (run $run)" api_gone
done
k delete deployment bench --wait=false >/dev/null
stop_agent

# --- through manifests ---------------------------------------------------------------------
agent_log=$man_root/agent.log
"$runp_bin" --root "$man_root" agent --runtime=process --manifests "$tmp/manifests" \
  --listen none >"$agent_log" 2>&1 &
agent=$!
man_running() { [ "$("$runp_bin" --root "$man_root" pods 2>/dev/null | grep -c ' Running ')" -eq "$1" ]; }
man_gone() { [ "$("$runp_bin" --root "$man_root" pods 2>/dev/null | grep -c bench-)" -eq 0 ]; }
mkdir -p "$tmp/staged"
for i in $(seq 1 "$pods"); do
  cat >"$tmp/staged/bench-$i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: bench-$i, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
EOF
done
sleep 2
man_times=()
for run in $(seq 1 "$runs"); do
  t0=$(now)
  cp "$tmp/staged/"*.yaml "$tmp/manifests/"
  wait_until "$pods manifest pods Running (run $run)" man_running "$pods"
  t=$(printf "%.2f" "$(echo "$(now) - $t0" | bc)")
  man_times+=("$t")
  say "manifest run $run: $pods pods Running in ${t}s"
  rm -f "$tmp/manifests/"*.yaml
  wait_until "manifest pods gone (run $run)" man_gone
done
stop_agent

api_med=$(printf '%s\n' "${api_times[@]}" | median)
man_med=$(printf '%s\n' "${man_times[@]}" | median)
ratio=$(echo "scale=2; $api_med / $man_med" | bc)
printf '\n%-44s %s\n' "runp bench-cluster ($pods pods, $runs runs)" "$(basename "$(dirname "$(dirname "$runp_bin")")")/$(basename "$(dirname "$runp_bin")") binary"
printf '%-44s %s\n' "API: 0->$pods Running in the API (median)" "${api_med}s  (runs: ${api_times[*]})"
printf '%-44s %s\n' "manifests: $pods Running (median)" "${man_med}s  (runs: ${man_times[*]})"
printf '%-44s %s\n' "ratio API / manifests (goal <= 1.3)" "${ratio}x"
printf '%-44s %s\n' "agent idle CPU with $pods API pods (${idle}s)" "${cpu_pct}% of one core"
printf '%-44s %s\n' "agent RSS with $pods API pods (max)" "${rss_mib} MiB"
printf '%-44s %s\n' "node API requests per minute at idle" "${requests%%|*}"
printf '%-44s %s\n' "  by verb and resource (${idle}s)" "${requests#*|}"
