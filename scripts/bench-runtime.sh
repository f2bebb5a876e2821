#!/usr/bin/env bash
# Pod start latency of runp (RunPodSandbox -> CreateContainer -> StartContainer, returning once
# the container runs) for N pods, beside `crun run -d` of an equivalent busybox bundle (same
# image, `sleep 1000`) in the same run; prints both medians and their ratio. The same calls also
# go through the CRI gRPC socket of `runp serve` (Rust client), interleaved pod by pod with the
# in-process ones: the ratio of those medians is the cost of the socket. Each pod's
# StopPodSandbox + RemovePodSandbox is timed too. Then containerd as a peer, with a CNI bridge
# for both (scripts/bench-containerd.sh), when it is installed.
# Usage: scripts/bench-runtime.sh [pods]   (default 50; needs root, crun, umoci; containerd)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
PODS="${1:-50}"
command -v crun >/dev/null || { echo "bench-runtime: crun is not installed (apt-get install crun)" >&2; exit 1; }
command -v umoci >/dev/null || { echo "bench-runtime: umoci is not installed (apt-get install umoci)" >&2; exit 1; }
scripts/build-fixtures.sh
FIXTURES="$PWD/rootfs-fixtures/build"

# Memory cgroups the kernel still holds, removed ones included: on cgroup v1 a removed pod's
# memcg lingers while page cache is charged to it. With 3334 of them (a day of 500-pod runs)
# runp's pod start read 25-29 ms here, and 12.7 ms once `echo 3 > /proc/sys/vm/drop_caches`
# had freed them (crun read 8.4 ms in the slow state). Printed so that a slow machine can be
# told from a slow runtime. runp's pods (in process and through runp serve) no longer add to
# it: 78 -> 84 over 64 of them (their init made mount targets on the disk, charging its
# metadata pages to the pod). The containerd part (runp with CNI beside containerd) still
# added 41, not attributed further.
echo "memory cgroups held by the kernel: $(awk '$1 == "memory" {print $3}' /proc/cgroups 2>/dev/null)" >&2
# Both runtimes keep their volatile state where a usual host has it, on tmpfs (/run/runp,
# /run/crun); this VM's /run is on its disk, so /dev/shm stands in for it. Records, writable
# layers and the bundle stay on disk (/tmp). On this disk (ext4 without a journal) creating a
# file costs 50-230 us right after deletions (ext4 skips recently freed inodes one by one).
STATE_BASE=/run
[ "$(findmnt -n -o FSTYPE -T /run 2>/dev/null)" = tmpfs ] || STATE_BASE=/dev/shm
echo "volatile state of both runtimes under $STATE_BASE" >&2
echo "== runp ($PODS pods, release build)" >&2
cargo bench --bench runtime_start -- --pods "$PODS" --fixtures "$FIXTURES" --grpc --state-base "$STATE_BASE" | tee /tmp/runp-bench.$$
RUNP_MS="$(sed -n 's/^RUNP_MEDIAN_MS=//p' /tmp/runp-bench.$$)"
RUNP_P90="$(sed -n 's/^RUNP_P90_MS=//p' /tmp/runp-bench.$$)"
read -r RUN_MS CREATE_MS START_MS <<<"$(sed -n 's/^RUNP_CALLS_MS=//p' /tmp/runp-bench.$$)"
GRPC_MS="$(sed -n 's/^GRPC_MEDIAN_MS=//p' /tmp/runp-bench.$$)"
RUNP_STOP_MS="$(sed -n 's/^RUNP_STOP_MEDIAN_MS=//p' /tmp/runp-bench.$$)"
RUNP_STOP_P90="$(sed -n 's/^RUNP_STOP_P90_MS=//p' /tmp/runp-bench.$$)"
GRPC_LINE="$(grep '^ratio gRPC' /tmp/runp-bench.$$)"
rm -f /tmp/runp-bench.$$

echo "== crun ($PODS containers)" >&2
WORK="$(mktemp -d /tmp/crun-bench.XXXXXX)"
STATE="$(mktemp -d "$STATE_BASE/crun-bench.XXXXXX")"
cleanup() {
  # Same view of cgroups as the runs (see below).
  unshare --mount --propagation private bash -c '
    if grep -q " /sys/fs/cgroup/unified cgroup2 " /proc/mounts; then umount /sys/fs/cgroup/unified; fi
    for id in $(crun --root "$1" list -q 2>/dev/null); do crun --root "$1" delete -f "$id" >/dev/null 2>&1 || true; done
  ' _ "$STATE"
  rm -rf "$WORK" "$STATE"
}
trap cleanup EXIT
umoci unpack --image "$FIXTURES/busybox-oci:docker.io/library/busybox:latest" "$WORK/bundle" >/dev/null
python3 - "$WORK/bundle/config.json" <<'PY'
import json, sys
path = sys.argv[1]
spec = json.load(open(path))
spec["process"]["args"] = ["sleep", "1000"]
spec["process"]["terminal"] = False
json.dump(spec, open(path, "w"))
PY
# Debian's crun refuses a cgroup v1 "hybrid" host ("cgroups in hybrid mode not supported"): it
# runs in a private mount namespace without the unified mount, so it sees plain cgroup v1 (as
# runp uses here). The timing loop runs inside that namespace; the containers outlive it.
cat >"$WORK/loop.sh" <<LOOP
set -euo pipefail
if grep -q ' /sys/fs/cgroup/unified cgroup2 ' /proc/mounts; then umount /sys/fs/cgroup/unified; fi
for i in \$(seq 1 $((PODS + 2))); do
  t0=\$(date +%s%N)
  crun --root "$STATE" run -d --bundle "$WORK/bundle" "bench-\$i" </dev/null >/dev/null 2>"$WORK/err" ||
    { cat "$WORK/err" >&2; exit 1; }
  t1=\$(date +%s%N)
  # The first two are warm-up, as for runp.
  if [ "\$i" -gt 2 ]; then echo \$(( t1 - t0 )); fi
done
LOOP
mapfile -t times < <(unshare --mount --propagation private bash "$WORK/loop.sh")
[ "${#times[@]}" -eq "$PODS" ] || { echo "bench-runtime: crun runs failed" >&2; exit 1; }
CRUN_MS="$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f", m/1e6}')"
CRUN_P90="$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {i=int(NR*0.9+0.5); if (i<1) i=1; printf "%.3f", a[i]/1e6}')"
echo "crun: $PODS containers, crun run -d: median $CRUN_MS ms, p90 $CRUN_P90 ms"
python3 -c "r=$RUNP_MS/$CRUN_MS; print(f'ratio runp/crun (median pod start vs median crun run): {r:.2f}x  (runp {$RUNP_MS:.1f} ms, crun {$CRUN_MS:.1f} ms)')"
echo "$GRPC_LINE"
bench_result "pod start, median ($PODS pods)" "$RUNP_MS" "crun run -d" "$CRUN_MS" ms "<= 1.5x"
bench_result "pod start, p90 ($PODS pods)" "$RUNP_P90" "crun run -d" "$CRUN_P90" ms "<= 1.5x"
bench_result "StartContainer alone, median" "$START_MS" "crun run -d" "$CRUN_MS" ms "<= 1.0x"
bench_result "RunPodSandbox alone, median" "$RUN_MS" "" "" ms ""
bench_result "CreateContainer alone, median" "$CREATE_MS" "" "" ms ""
bench_result "pod start through runp serve (gRPC), median" "$GRPC_MS" "in process" "$RUNP_MS" ms ""
bench_result "stop + remove pod, loopback, median ($PODS pods)" "$RUNP_STOP_MS" "" "" ms ""
bench_result "stop + remove pod, loopback, p90 ($PODS pods)" "$RUNP_STOP_P90" "" "" ms ""
if command -v containerd >/dev/null; then
  scripts/bench-containerd.sh "$PODS"
else
  echo "bench-runtime: containerd is not installed (apt-get install containerd): no containerd peer" >&2
fi
