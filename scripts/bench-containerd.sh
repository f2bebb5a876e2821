#!/usr/bin/env bash
# containerd (Debian's, with runc) as a same-run peer of runp: pod start (RunPodSandbox ->
# CreateContainer -> StartContainer, busybox `sleep 1000`) and StopPodSandbox + RemovePodSandbox
# of N pods, timed by benches/runtime_start.rs --endpoint with the project's CRI gRPC client on
# both sockets, interleaved pod by pod (runp as `runp serve`, so both pay the same socket).
# Like for like on the network: both attach each pod to a CNI bridge (bridge + host-local +
# portmap, runp's own conflist shape), each on its own bridge and /24. A second `runp serve`
# with `--network bridge` (the same bridge shape made in process, no plugin execs) is timed in
# the same interleaving, on a third bridge and /24. The pod and container
# configs are the same; containerd's pause container per pod is its design, not a setup choice.
# Starts its own containerd (config, root, state and sockets under a temp dir) and stops it
# again; leaves no daemon, shim, mount, bridge, netns or iptables chain behind.
# Usage: scripts/bench-containerd.sh [pods]   (default 50; root; called by bench-runtime.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
PODS="${1:-50}"
for tool in containerd ctr runc; do
  command -v "$tool" >/dev/null ||
    { echo "bench-containerd: $tool is not installed (apt-get install containerd)" >&2; exit 1; }
done
for plugin in bridge host-local portmap; do
  [ -x "/usr/lib/cni/$plugin" ] || {
    echo "bench-containerd: /usr/lib/cni/$plugin missing (apt-get install containernetworking-plugins)" >&2
    exit 1
  }
done
command -v umoci >/dev/null || { echo "bench-containerd: umoci is not installed (apt-get install umoci)" >&2; exit 1; }
scripts/build-fixtures.sh
FIXTURES="$PWD/rootfs-fixtures/build"
BUSYBOX=docker.io/library/busybox:latest
PAUSE=localhost/bench/pause:1
# Bridges and subnets of neither runp's nor containerd's defaults, so nothing else is touched.
CTD_BRIDGE=ctdbench0 CTD_CIDR=10.244.250.0/24
RUNP_BRIDGE=runpbench0 RUNP_CIDR=10.244.251.0/24
NATIVE_BRIDGE=runpbench1 NATIVE_CIDR=10.244.252.0/24

WORK="$(mktemp -d /tmp/ctd-bench.XXXXXX)"
# Volatile state (containerd's state and runc's root, runp's --state-dir) where a usual host has
# it, on tmpfs; this VM's /run is on its disk, so /dev/shm stands in for it then.
STATE_BASE=/run
[ "$(findmnt -n -o FSTYPE -T /run 2>/dev/null)" = tmpfs ] || STATE_BASE=/dev/shm
STATE="$(mktemp -d "$STATE_BASE/ctd-bench-state.XXXXXX")"
SOCK="$WORK/containerd.sock"
CTR=(ctr --address "$SOCK" --namespace k8s.io)
CTD_PID=""
# Host paths containerd and the CNI plugins use whatever the config says; whichever did not
# exist before is removed again (when empty) at the end.
HOST_DIRS=(/run/containerd/s /run/containerd /var/run/netns /var/lib/cni/results /var/lib/cni)
new_dirs=()
for d in "${HOST_DIRS[@]}"; do [ -e "$d" ] || new_dirs+=("$d"); done
# The named network namespaces (none, and no directory, on a host that never made one).
netns_names() { { ls /var/run/netns 2>/dev/null || true; } | sort; }
netns_names >"$WORK/netns.before"

# The bench's pods go through each runtime's own teardown (CNI DEL included) while it runs.
remove_all() {
  cargo bench --quiet --bench runtime_start -- --endpoint "unix://$1" --remove-all >&2 ||
    echo "bench-containerd: could not remove the pods of $1" >&2
}

cleanup() {
  set +e
  # The bench removes its pods even when it fails; this is for a bench that died.
  for dir in "$WORK/runp" "$WORK/runp/bridge"; do
    RUNP_PID="$(pgrep -f -- "--root $dir/serve " | head -n1)"
    if [ -n "$RUNP_PID" ]; then
      remove_all "$dir/cri.sock"
      kill "$RUNP_PID"
      for _ in $(seq 100); do kill -0 "$RUNP_PID" 2>/dev/null || break; sleep 0.1; done
    fi
  done
  if [ -n "$CTD_PID" ] && kill -0 "$CTD_PID" 2>/dev/null; then
    [ -z "$("${CTR[@]}" containers ls -q 2>/dev/null)" ] || remove_all "$SOCK"
    # Tasks killed this way skip the CNI DEL: hence the netns, bridge and chain clean-up below.
    for id in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
      echo "bench-containerd: killing leftover task $id" >&2
      "${CTR[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1
      sleep 0.2
      "${CTR[@]}" tasks delete -f "$id" >/dev/null 2>&1
    done
    for id in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers rm "$id" >/dev/null 2>&1; done
    kill "$CTD_PID"
    for _ in $(seq 50); do kill -0 "$CTD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$CTD_PID" 2>/dev/null
  fi
  # Shims outlive containerd by design; ours are the ones given our socket.
  for pid in $(pgrep -f -- "-address $SOCK" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  # A pod killed above keeps its netns (cni-<uuid>, as other runtimes name theirs): ours have
  # an address in our subnet.
  netns_names | comm -13 "$WORK/netns.before" - | { grep '^cni-' || true; } |
    while read -r ns; do
      ip netns exec "$ns" ip -o -4 addr show 2>/dev/null | grep -qF " ${CTD_CIDR%.0/24}." || continue
      echo "bench-containerd: removing leftover netns $ns" >&2
      umount "/var/run/netns/$ns" && rm -f "/var/run/netns/$ns"
    done
  grep -o " \($WORK\|$STATE\)/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  for br in "$CTD_BRIDGE" "$RUNP_BRIDGE" "$NATIVE_BRIDGE"; do
    ip link show "$br" >/dev/null 2>&1 && ip link delete "$br"
  done
  # The per-pod masquerade chains a DEL would have removed, now that no runtime of ours is left
  # to run it: found by our subnets, as other runtimes on the host make CNI-* chains too.
  for cidr in "$CTD_CIDR" "$RUNP_CIDR"; do
    iptables -t nat -S POSTROUTING | grep -F -- "-s ${cidr%.0/24}." | grep -- " -j CNI-" |
      while read -r rule; do
        chain="${rule##* -j }"
        eval iptables -t nat "${rule/#-A/-D}"
        iptables -t nat -F "$chain" && iptables -t nat -X "$chain"
      done
  done
  # The bridge network's one masquerade rule (it outlives the runtime by design).
  iptables -t nat -D POSTROUTING -s "$NATIVE_CIDR" ! -d "$NATIVE_CIDR" -m comment \
    --comment "runp bridge network $NATIVE_BRIDGE" -j MASQUERADE 2>/dev/null
  for d in "${new_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
  rm -rf "$WORK" "$STATE"
}
trap cleanup EXIT

# containerd needs a sandbox ("pause") image: busybox sleeping, tagged from the same layout.
cp -r "$FIXTURES/busybox-oci" "$WORK/pause-oci"
umoci config --image "$WORK/pause-oci:$BUSYBOX" --tag "$PAUSE" --config.cmd sleep --config.cmd 2000000000
for tag in $(umoci ls --layout "$WORK/pause-oci"); do
  [ "$tag" = "$PAUSE" ] || umoci rm --image "$WORK/pause-oci:$tag"
done
tar -C "$WORK/pause-oci" -cf "$WORK/pause-oci.tar" .

mkdir -p "$WORK/cni"
cat >"$WORK/cni/10-bench.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "ctdbench", "plugins": [
  {"type": "bridge", "bridge": "$CTD_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$CTD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$WORK/cni-data"}},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}
EOF
# restrict_oom_score_adj: runc cannot lower the OOM score here (an unprivileged container
# host), and without it every sandbox fails. runc's Root moves its state off /run/containerd.
cat >"$WORK/config.toml" <<EOF
version = 2
root = "$WORK/root"
state = "$STATE/containerd"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$WORK/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$STATE/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$WORK/cni"
EOF

echo "== containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1 {print $3}') ($PODS pods; volatile state under $STATE_BASE)" >&2
containerd --config "$WORK/config.toml" >"$WORK/containerd.log" 2>&1 &
CTD_PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { tail -20 "$WORK/containerd.log" >&2; echo "bench-containerd: containerd did not start" >&2; exit 1; }
"${CTR[@]}" images import "$WORK/pause-oci.tar" >/dev/null
"${CTR[@]}" images import "$FIXTURES/busybox-oci.tar" >/dev/null
"${CTR[@]}" images ls -q | grep -qx "$BUSYBOX" ||
  { echo "bench-containerd: ctr import did not register $BUSYBOX" >&2; exit 1; }

OUT="$WORK/bench.out"
cargo bench --bench runtime_start -- --pods "$PODS" --fixtures "$FIXTURES" \
  --endpoint "unix://$SOCK" --image "$BUSYBOX" --dir "$WORK/runp" \
  --runp-network "--network,cni,--pod-cidr,$RUNP_CIDR,--pod-bridge,$RUNP_BRIDGE,--state-dir,$STATE/runp" \
  --runp-bridge-network "--network,bridge,--pod-cidr,$NATIVE_CIDR,--pod-bridge,$NATIVE_BRIDGE,--state-dir,$STATE/runp-bridge" |
  tee "$OUT" || {
  grep -E 'level=(error|fatal)' "$WORK/containerd.log" | tail -20 >&2
  echo "bench-containerd: the bench failed (containerd's errors above)" >&2
  exit 1
}
figure() { bench_figure "$OUT" "$1"; }
python3 - "$(figure PEER_MEDIAN_MS)" "$(figure PEER_STOP_MEDIAN_MS)" \
  "$(figure RUNP_CNI_MEDIAN_MS)" "$(figure RUNP_CNI_STOP_MEDIAN_MS)" \
  "$(figure RUNP_BRIDGE_MEDIAN_MS)" "$(figure RUNP_BRIDGE_STOP_MEDIAN_MS)" <<'PY'
import sys
peer_start, peer_stop, *runp = map(float, sys.argv[1:])
for name, (start, stop) in zip(["CNI bridge", "bridge in process"], [runp[0:2], runp[2:4]]):
    print(f"containerd / runp ({name}), median pod start: {peer_start / start:.2f}x  (runp {start:.1f} ms, containerd {peer_start:.1f} ms; goal >= 10x)")
    print(f"containerd / runp ({name}), median stop + remove: {peer_stop / stop:.2f}x  (runp {stop:.1f} ms, containerd {peer_stop:.1f} ms; goal >= 10x)")
PY
# bench_result's ratio is runp / peer: ">= 10x faster" is a ratio <= 0.1.
GOAL="<= 0.1x (>= 10x faster)"
bench_result "pod start with CNI bridge, median ($PODS pods)" "$(figure RUNP_CNI_MEDIAN_MS)" \
  containerd "$(figure PEER_MEDIAN_MS)" ms "$GOAL"
bench_result "pod start with CNI bridge, p90 ($PODS pods)" "$(figure RUNP_CNI_P90_MS)" \
  containerd "$(figure PEER_P90_MS)" ms "$GOAL"
bench_result "stop + remove pod, median ($PODS pods)" "$(figure RUNP_CNI_STOP_MEDIAN_MS)" \
  containerd "$(figure PEER_STOP_MEDIAN_MS)" ms "$GOAL"
bench_result "stop + remove pod, p90 ($PODS pods)" "$(figure RUNP_CNI_STOP_P90_MS)" \
  containerd "$(figure PEER_STOP_P90_MS)" ms "$GOAL"
bench_result "pod start, runp's bridge in process, median ($PODS pods)" "$(figure RUNP_BRIDGE_MEDIAN_MS)" \
  containerd "$(figure PEER_MEDIAN_MS)" ms "$GOAL"
bench_result "pod start, runp's bridge in process, p90 ($PODS pods)" "$(figure RUNP_BRIDGE_P90_MS)" \
  containerd "$(figure PEER_P90_MS)" ms "$GOAL"
bench_result "stop + remove pod, runp's bridge in process, median ($PODS pods)" "$(figure RUNP_BRIDGE_STOP_MEDIAN_MS)" \
  containerd "$(figure PEER_STOP_MEDIAN_MS)" ms "$GOAL"
bench_result "stop + remove pod, runp's bridge in process, p90 ($PODS pods)" "$(figure RUNP_BRIDGE_STOP_P90_MS)" \
  containerd "$(figure PEER_STOP_P90_MS)" ms "$GOAL"
