#!/usr/bin/env bash
# Convergence of `runp agent --runtime=process`: time from starting the agent (the N manifests
# already in its directory) until every pod's status file says Running, for N = 1, 50, 200,
# beside the same N pods started directly through the in-process CRI (RunPodSandbox ->
# CreateContainer -> StartContainer, in sequence and all at once) in the same run; then the
# agent's idle CPU and RSS holding the largest N, beside the runtime alone holding as many.
# Medians of RUNS runs; every pod is removed afterwards (through the agent: manifests deleted).
# Usage: scripts/bench-agent.sh [RUNS] [IDLE_SECONDS] [COUNTS]   (defaults 3, 30, 1,50,200; root)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
IDLE="${2:-30}"
COUNTS="${3:-1,50,200}"
[ "$(id -u)" -eq 0 ] || { echo "bench-agent: needs root (the process runtime)" >&2; exit 1; }
scripts/build-fixtures.sh
echo "== runp agent vs direct CRI (pods $COUNTS, $RUNS runs, idle ${IDLE}s; release build)" >&2
cargo bench --bench agent_start -- --pods "$COUNTS" --runs "$RUNS" --idle-secs "$IDLE" \
  --fixtures "$PWD/rootfs-fixtures/build"
