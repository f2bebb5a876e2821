#!/usr/bin/env bash
# The size of what ships: the release binary as built (with line tables, for profiling), stripped
# as scripts/build-packaging.sh ships it, and its separate debug file.
# Usage: scripts/bench-binary.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
cargo build --release --quiet --bin runp
out="$(mktemp -d /tmp/runp-bench-binary.XXXXXX)"
trap 'rm -rf "$out"' EXIT
scripts/build-packaging.sh "$out" 2>&1 | grep -v '^build-packaging: wrote' >&2
mib() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1048576 }'; }
built="$(mib target/release/runp)" stripped="$(mib "$out/bin/runp")" debug="$(mib "$out/debug/runp.debug")"
echo "release binary: as built $built MiB, shipped stripped $stripped MiB, debug file $debug MiB"
bench_result "release binary, stripped (shipped)" "$stripped" "as built, with line tables" "$built" MiB ""
bench_result "release binary, separate debug file" "$debug" "" "" MiB ""
