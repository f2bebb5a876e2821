#!/usr/bin/env bash
# Benchmark: `runp image load` (import + verify + unpack, release build) against plain
# `tar -xzf` of the same gzip layers into fresh directories. Prints medians of RUNS runs and
# the ratio runp/tar for each image:
#   busybox   - the busybox fixture (OCI tarball, 3 small layers)
#   python    - one ~54 MB layer of /usr/lib/python3.* (thousands of small files), built here
# Usage: scripts/bench-image.sh [RUNS]   (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
RUNS="${1:-7}"
scripts/build-fixtures.sh
cargo build --release --quiet --bin runp
RUNP="$PWD/target/release/runp"
BUILD="$PWD/rootfs-fixtures/build"
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/runp-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# A larger image, cached next to the fixtures.
scripts/bench-python-image.sh

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

bench() { # bench NAME OCI_TARBALL
  local name="$1" archive="$2" layers=() runp_times=() tar_times=()
  # The gzip layer blobs of the image, for tar.
  mkdir -p "$WORK/$name-src"
  tar -xf "$archive" -C "$WORK/$name-src"
  for blob in "$WORK/$name-src"/blobs/sha256/*; do
    if [ "$(head -c2 "$blob" | od -An -tx1 | tr -d ' ')" = 1f8b ]; then layers+=("$blob"); fi
  done
  for _ in $(seq "$RUNS"); do
    rm -rf "$WORK/store" "$WORK/tar-out"
    sync
    local t0; t0=$(now_ns)
    "$RUNP" --image-root "$WORK/store" --log-level warn image load "$archive" >/dev/null
    runp_times+=($(( $(now_ns) - t0 )))

    sync
    t0=$(now_ns)
    local i=0
    for layer in "${layers[@]}"; do
      mkdir -p "$WORK/tar-out/$i"
      tar -xzf "$layer" -C "$WORK/tar-out/$i"
      i=$((i + 1))
    done
    tar_times+=($(( $(now_ns) - t0 )))
  done
  local runp_ms tar_ms
  runp_ms=$(printf '%s\n' "${runp_times[@]}" | median | awk '{printf "%.1f", $1/1e6}')
  tar_ms=$(printf '%s\n' "${tar_times[@]}" | median | awk '{printf "%.1f", $1/1e6}')
  printf '%-8s layers=%d size=%s runs=%d  runp image load: %8s ms   tar -xzf: %8s ms   ratio: %sx\n' \
    "$name" "${#layers[@]}" "$(du -sh "$archive" | cut -f1)" "$RUNS" "$runp_ms" "$tar_ms" \
    "$(awk -v a="$runp_ms" -v b="$tar_ms" 'BEGIN {printf "%.2f", a/b}')"
  local goal="<= 1.0x"
  [ "$name" = busybox ] || goal="<= 0.9x"
  bench_result "image load: $name ($(du -sh "$archive" | cut -f1))" "$runp_ms" "tar -xzf" "$tar_ms" ms "$goal"
}

bench busybox "$BUILD/busybox-oci.tar"
if [ -f "$BUILD/bench-python-oci.tar" ]; then
  bench python "$BUILD/bench-python-oci.tar"
fi
