#!/usr/bin/env bash
# The kubelet API's throughput and round trip on a real control plane (../shared/k8s), with
# `runp agent --kubeconfig --kubelet-port` as node kbench-node:
#  * `kubectl logs` of a container that wrote LOG_MB MB (100-byte lines) vs `cat` of its CRI
#    log file (the same lines plus CRI's timestamp/stream/tag prefix): medians of LOG_RUNS runs,
#    MB/s and the ratio (kubectl goes API server -> kubelet port -> /containerLogs), with the
#    agent's CPU seconds per kubectl logs and the same read by curl at the kubelet port;
#  * `kubectl exec POD -- true` round trip (API server -> kubelet port -> CRI streaming) vs
#    `runp exec POD -- true` through the agent's CRI socket (ExecSync): median and p90 of
#    EXEC_RUNS runs each.
# The curl line separates the agent's share from the API server's and kubectl's: with a release
# binary here the kubelet port served 100 MB in 0.30 s while kubectl logs took 2.2 s.
# Usage: sudo scripts/bench-kubelet-api.sh
#   LOG_MB (100) LOG_RUNS (3) EXEC_RUNS (20) TIMEOUT (300 s per wait) RUNP_K8S_DIR
#   RUNP_BIN (default target/release/runp, built if missing; a debug binary works too and
#   is named in the output)
set -euo pipefail
cd "$(dirname "$0")/.."
project=$PWD
k8s_dir=${RUNP_K8S_DIR:-$project/../shared/k8s}
log_mb=${LOG_MB:-100}
log_runs=${LOG_RUNS:-3}
exec_runs=${EXEC_RUNS:-20}
timeout=${TIMEOUT:-300}
node=kbench-node
[ "$(id -u)" -eq 0 ] || { echo "bench-kubelet-api: needs root (the process runtime)" >&2; exit 1; }
[ -f "$k8s_dir/start-cluster.sh" ] || { echo "bench-kubelet-api: no control plane at $k8s_dir" >&2; exit 1; }
if [ -n "${RUNP_BIN:-}" ]; then runp_bin=$RUNP_BIN
elif [ -x target/release/runp ]; then runp_bin=target/release/runp
else cargo build --release --quiet; runp_bin=target/release/runp
fi
runp_bin=$(realpath "$runp_bin")
scripts/build-fixtures.sh

tmp=$(mktemp -d /tmp/runp-bench-kapi.XXXXXX)
root=$tmp/root
agent=
agent_log=$root/agent.log
cluster_started=
say() { echo "== $*" >&2; }
k() { kubectl --kubeconfig "$K8S_ADMIN_KUBECONFIG" --request-timeout=300s "$@"; }

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
    echo "bench-kubelet-api: FAILED (exit $rc); agent log tail ($agent_log):" >&2
    tail -n 30 "$agent_log" 2>/dev/null >&2 || true
  fi
  # Pods outlive a stopped agent: remove them through it first.
  if [ -n "$agent" ] && kill -0 "$agent" 2>/dev/null && [ -n "$cluster_started" ]; then
    k delete pod kbench --ignore-not-found --grace-period=1 --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do
      [ "$("$runp_bin" --root "$root" pods 2>/dev/null | grep -c kbench)" -eq 0 ] && break
      sleep 1
    done
  fi
  stop_agent
  [ -z "$cluster_started" ] || bash "$k8s_dir/stop-cluster.sh" "$tmp/k8s" >/dev/null 2>&1 || true
  if [ "$rc" -eq 0 ]; then rm -rf "$tmp"; else echo "bench-kubelet-api: state kept in $tmp" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_until() {
  local what=$1; shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$agent" ] && ! kill -0 "$agent" 2>/dev/null; then
      echo "bench-kubelet-api: the agent exited while waiting for $what" >&2; return 1
    fi
    [ "$SECONDS" -lt "$deadline" ] || { echo "bench-kubelet-api: timed out (${timeout}s): $what" >&2; return 1; }
    sleep 0.2
  done
}
now() { date +%s.%N; }
# Seconds `"$@"` takes (output discarded).
took() { local t0; t0=$(now); "$@" >/dev/null; printf "%.4f\n" "$(echo "$(now) - $t0" | bc)"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.4f\n", (a[NR/2]+a[NR/2+1])/2}'; }
p90() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.9+0.999); if (i<1) i=1; print a[i]}'; }
ms() { printf "%.1f" "$(echo "$1 * 1000" | bc)"; }

say "control plane in $tmp/k8s"
mkdir -p "$tmp/k8s" "$root"
cluster_started=1
NODE_NAME=$node K8S_BIN_CACHE=${K8S_BIN_CACHE:-/tmp/runp-k8s-bin-cache} \
  bash "$k8s_dir/start-cluster.sh" "$tmp/k8s" >"$tmp/start-cluster.log" 2>&1 \
  || { cat "$tmp/start-cluster.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$tmp/k8s/env"
"$runp_bin" --root "$root" image load rootfs-fixtures/build/busybox-oci.tar >/dev/null 2>&1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# One log file: no rotation during the write.
"$runp_bin" --root "$root" agent --runtime=process --kubeconfig "$K8S_NODE_KUBECONFIG" \
  --node-name "$node" --node-ip 127.0.0.1 --address 127.0.0.1 --kubelet-port "$port" \
  --client-ca-file "$K8S_CA" --container-log-max-size $((4 * log_mb * 1000000)) \
  >"$agent_log" 2>&1 &
agent=$!
wait_until "node $node Ready" k wait --for=condition=Ready "node/$node" --timeout=5s
bytes=$((log_mb * 1000000))
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: kbench, namespace: default}
spec:
  nodeName: $node
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: log
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopq | head -c $bytes; echo END-OF-LOG; exec sleep 3600"]
EOF
running() { [ "$(k get pod kbench -o jsonpath='{.status.phase}')" = Running ]; }
wait_until "kbench Running" running
log_file=
found_log() {
  log_file=$(find "$root" -path '*kbench*' -name '0.log' | head -n 1)
  [ -n "$log_file" ] && tail -c 200 "$log_file" | grep -q END-OF-LOG
}
say "waiting for the ${log_mb} MB log"
wait_until "the ${log_mb} MB log written" found_log
found_log
file_bytes=$(stat -c %s "$log_file")
got=$(k logs kbench | wc -c)
want=$((bytes + 11))
[ "$got" -eq "$want" ] || { echo "bench-kubelet-api: kubectl logs gave $got bytes, want $want" >&2; exit 1; }

say "kubectl logs vs cat ($log_runs runs each)"
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$agent/stat"; }
direct() {
  curl -sSk --cert "$K8S_ADMIN_CERT" --key "$K8S_ADMIN_KEY" \
    "https://127.0.0.1:$port/containerLogs/default/kbench/log"
}
logs_times=(); cat_times=(); direct_times=(); agent_ticks=0
for _ in $(seq 1 "$log_runs"); do
  c0=$(ticks)
  logs_times+=("$(took k logs kbench)")
  agent_ticks=$((agent_ticks + $(ticks) - c0))
  direct_times+=("$(took direct)")
  cat_times+=("$(took cat "$log_file")")
done
logs_med=$(printf '%s\n' "${logs_times[@]}" | median)
direct_med=$(printf '%s\n' "${direct_times[@]}" | median)
cat_med=$(printf '%s\n' "${cat_times[@]}" | median)
agent_cpu=$(printf "%.2f" "$(echo "scale=3; $agent_ticks / $hz / $log_runs" | bc)")

say "exec round trips ($exec_runs runs each)"
kexec=(); rexec=()
k exec kbench -- true
"$runp_bin" --root "$root" exec kbench -- true
for _ in $(seq 1 "$exec_runs"); do
  kexec+=("$(took k exec kbench -- true)")
  rexec+=("$(took "$runp_bin" --root "$root" exec kbench -- true)")
done

mbps() { echo "scale=1; $1 / 1000000 / $2" | bc; }
printf '\n%-46s %s\n' "runp bench-kubelet-api" "$(basename "$(dirname "$(dirname "$runp_bin")")")/$(basename "$(dirname "$runp_bin")") binary"
printf '%-46s %s\n' "kubectl logs, ${log_mb} MB (median)" "${logs_med}s = $(mbps "$got" "$logs_med") MB/s  (runs: ${logs_times[*]})"
printf '%-46s %s\n' "  agent CPU per kubectl logs" "${agent_cpu}s"
printf '%-46s %s\n' "kubelet port directly (curl, median)" "${direct_med}s = $(mbps "$got" "$direct_med") MB/s  (runs: ${direct_times[*]})"
printf '%-46s %s\n' "cat of its CRI log file, $((file_bytes / 1000000)) MB (median)" "${cat_med}s = $(mbps "$file_bytes" "$cat_med") MB/s  (runs: ${cat_times[*]})"
printf '%-46s %s\n' "ratio kubectl logs / cat" "$(echo "scale=1; $logs_med / $cat_med" | bc)x"
printf '%-46s %s\n' "kubectl exec kbench -- true" "median $(ms "$(printf '%s\n' "${kexec[@]}" | median)") ms, p90 $(ms "$(printf '%s\n' "${kexec[@]}" | p90)") ms"
printf '%-46s %s\n' "runp exec kbench -- true (CRI socket)" "median $(ms "$(printf '%s\n' "${rexec[@]}" | median)") ms, p90 $(ms "$(printf '%s\n' "${rexec[@]}" | p90)") ms"
