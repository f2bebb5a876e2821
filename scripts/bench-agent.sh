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
. scripts/bench-lib.sh
RUNS="${1:-3}"
IDLE="${2:-30}"
COUNTS="${3:-1,50,200}"
[ "$(id -u)" -eq 0 ] || { echo "bench-agent: needs root (the process runtime)" >&2; exit 1; }
scripts/build-fixtures.sh
echo "== runp agent vs direct CRI (pods $COUNTS, $RUNS runs, idle ${IDLE}s; release build)" >&2
out="$(mktemp /tmp/runp-bench-agent.XXXXXX)"
trap 'rm -f "$out"' EXIT
cargo bench --bench agent_start -- --pods "$COUNTS" --runs "$RUNS" --idle-secs "$IDLE" \
  --fixtures "$PWD/rootfs-fixtures/build" | tee "$out"
figure() { bench_figure "$out" "$1"; }
for n in ${COUNTS//,/ }; do
  bench_result "agent: $n pods to Running" "$(figure "AGENT_MS_$n")" "direct CRI in sequence" \
    "$(figure "DIRECT_SEQ_MS_$n")" ms "<= 1.1x"
  bench_result "agent: $n pods torn down" "$(figure "AGENT_DOWN_MS_$n")" "direct CRI stop+remove" \
    "$(figure "DIRECT_DOWN_MS_$n")" ms ""
done
if grep -q '^IDLE_PODS=' "$out"; then
  pods="$(figure IDLE_PODS)"
  bench_result "agent idle with $pods pods, CPU" "$(figure AGENT_CPU)" "runtime alone" \
    "$(figure DIRECT_CPU)" "% of a core" "<= 1 %"
  bench_result "agent idle with $pods pods, RSS" "$(figure AGENT_RSS_MIB)" "runtime alone" \
    "$(figure DIRECT_RSS_MIB)" MiB "<= 80 MiB"
fi
