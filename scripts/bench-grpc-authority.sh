#!/usr/bin/env bash
# The cost per RPC of the CRI socket's :authority adapter (src/cri/authority): one tonic server
# on two unix sockets, with and without the adapter, the same unary call interleaved in blocks
# of 100 on both; prints both medians and the difference, then the rewriter's own time for a
# typical request. Usage: scripts/bench-grpc-authority.sh [CALLS]   (default 20000; release)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
CALLS="${1:-20000}"
out="$(mktemp /tmp/runp-bench-authority.XXXXXX)"
trap 'rm -f "$out"' EXIT
cargo bench --bench grpc_authority -- --calls "$CALLS" | tee "$out"
figure() { bench_figure "$out" "$1"; }
bench_result "unary CRI RPC with the :authority rewriter" "$(figure MEDIAN_US_WITH)" \
  "without it" "$(figure MEDIAN_US_WITHOUT)" "µs" ""
