#!/usr/bin/env bash
# Benchmark: `runp image pull` (release build) from a loopback registry (Debian's
# docker-registry, plain http) against, in the same run and on the same image:
#   skopeo - `skopeo copy docker://... oci:DIR` then `tar -xzf` of each of its layer blobs into
#            its own directory (the peer the issue names: copy + unpack); the copy alone is
#            printed too
#   load   - `runp image load` of the same image from a local OCI tarball (runp's in-process
#            path: verify + unpack, no HTTP)
# Every run starts from an empty store / output directory. Prints medians of RUNS runs and the
# ratios pull/skopeo and pull/load for each image:
#   busybox - the busybox fixture (3 small layers)
#   python  - one ~54 MB layer of /usr/lib/python3.* (scripts/bench-python-image.sh)
# Usage: scripts/bench-pull.sh [RUNS]   (default 7). Needs docker-registry and skopeo.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
RUNS="${1:-7}"
for tool in docker-registry skopeo; do
  command -v "$tool" >/dev/null || { echo "bench-pull: needs $tool" >&2; exit 1; }
done
scripts/build-fixtures.sh
scripts/bench-python-image.sh
cargo build --release --quiet --bin runp
RUNP="$PWD/target/release/runp"
BUILD="$PWD/rootfs-fixtures/build"
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/runp-bench-pull.XXXXXX")"
REGISTRY_PID=""
cleanup() {
  if [ -n "$REGISTRY_PID" ]; then kill "$REGISTRY_PID" 2>/dev/null || true; wait "$REGISTRY_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
ADDR="127.0.0.1:$PORT"
mkdir -p "$WORK/storage"
cat >"$WORK/config.yml" <<YAML
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $WORK/storage
http:
  addr: $ADDR
YAML
docker-registry serve "$WORK/config.yml" >"$WORK/registry.log" 2>&1 &
REGISTRY_PID=$!
for _ in $(seq 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
  sleep 0.1
done

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ms() { printf '%s\n' "$@" | median | awk '{printf "%.1f", $1/1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }

bench() { # bench NAME OCI_TARBALL REF_IN_TARBALL
  local name="$1" archive="$2" ref="$3" pull_t=() skopeo_t=() unpack_t=() load_t=()
  local image="$ADDR/bench/$name:1"
  skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci-archive:$archive:$ref" "docker://$image"
  for _ in $(seq "$RUNS"); do
    rm -rf "$WORK/store" "$WORK/skopeo-out" "$WORK/skopeo-unpacked" "$WORK/load-store"
    sync
    local t0; t0=$(now_ns)
    "$RUNP" --image-root "$WORK/store" --log-level warn image pull "$image" --insecure-registry "$ADDR" >/dev/null
    pull_t+=($(( $(now_ns) - t0 )))

    sync
    t0=$(now_ns)
    skopeo --insecure-policy copy --quiet --src-tls-verify=false "docker://$image" "oci:$WORK/skopeo-out:x"
    skopeo_t+=($(( $(now_ns) - t0 )))
    local i=0
    for blob in "$WORK/skopeo-out"/blobs/sha256/*; do
      if [ "$(head -c2 "$blob" | od -An -tx1 | tr -d ' ')" = 1f8b ]; then
        mkdir -p "$WORK/skopeo-unpacked/$i"
        tar -xzf "$blob" -C "$WORK/skopeo-unpacked/$i"
        i=$((i + 1))
      fi
    done
    unpack_t+=($(( $(now_ns) - t0 )))

    sync
    t0=$(now_ns)
    "$RUNP" --image-root "$WORK/load-store" --log-level warn image load "$archive" >/dev/null
    load_t+=($(( $(now_ns) - t0 )))
  done
  local pull_ms skopeo_ms unpack_ms load_ms
  pull_ms=$(ms "${pull_t[@]}"); skopeo_ms=$(ms "${skopeo_t[@]}"); unpack_ms=$(ms "${unpack_t[@]}")
  load_ms=$(ms "${load_t[@]}")
  printf '%-8s size=%s runs=%d  runp image pull: %7s ms  skopeo copy + tar -xzf: %7s ms (copy alone %s ms)  runp image load: %7s ms  pull/(skopeo+tar): %sx  pull/skopeo: %sx  pull/load: %sx\n' \
    "$name" "$(du -sh "$archive" | cut -f1)" "$RUNS" "$pull_ms" "$unpack_ms" "$skopeo_ms" "$load_ms" \
    "$(ratio "$pull_ms" "$unpack_ms")" "$(ratio "$pull_ms" "$skopeo_ms")" "$(ratio "$pull_ms" "$load_ms")"
  bench_result "image pull: $name (loopback registry)" "$pull_ms" "skopeo copy + tar -xzf" "$unpack_ms" ms "<= 1.2x"
}

bench busybox "$BUILD/busybox-oci.tar" "docker.io/library/busybox:latest"
if [ -f "$BUILD/bench-python-oci.tar" ]; then
  bench python "$BUILD/bench-python-oci.tar" "bench.test/python:1"
fi
