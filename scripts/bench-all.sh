#!/usr/bin/env bash
# Runs every benchmark and prints one table (measure, runp, peer, ratio, goal), also written as
# JSON to OUT (default target/bench-all.json) with the machine it ran on. The figures are medians
# (and p90 where named) against a peer measured in the same run; see each script for how.
# Usage: scripts/bench-all.sh [OUT]   (root; release build)
# Env: RUNS (image/pull/agent runs, default 5), PODS (pod starts, default 30),
#      AGENT_COUNTS (default 1,50,500), CLUSTER=1 also runs scripts/bench-cluster.sh (needs the
#      control plane, RUNP_K8S_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-target/bench-all.json}"
RUNS="${RUNS:-5}"
PODS="${PODS:-30}"
AGENT_COUNTS="${AGENT_COUNTS:-1,50,500}"
[ "$(id -u)" -eq 0 ] || { echo "bench-all: needs root (the process runtime)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
BENCH_RESULTS="$(mktemp /tmp/runp-bench-all.XXXXXX)"
export BENCH_RESULTS
trap 'rm -f "$BENCH_RESULTS"' EXIT
failed=()
run() {
  echo "== bench-all: $*" >&2
  "$@" || failed+=("$1")
}
cargo build --release --quiet
run scripts/bench-image.sh "$RUNS"
run scripts/bench-pull.sh "$RUNS"
run scripts/bench-runtime.sh "$PODS"
run scripts/bench-agent.sh 3 30 "$AGENT_COUNTS"
run scripts/bench-grpc-authority.sh
run scripts/bench-binary.sh
if [ "${CLUSTER:-0}" = 1 ]; then run scripts/bench-cluster.sh; fi
python3 - "$BENCH_RESULTS" "$OUT" "${failed[*]:-}" <<'PY'
import json, os, platform, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem_kb = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
machine = f"{os.cpu_count()} cores ({cpu}), {mem_kb / 1048576:.0f} GiB, Linux {platform.release()}"
failed = sys.argv[3].split()
json.dump({"machine": machine, "failed": failed, "results": rows}, open(sys.argv[2], "w"), indent=1)
def num(v):
    return "" if v is None else (f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}")
print(f"\nMachine: {machine}\n")
print("| measure | runp | peer | ratio | goal |")
print("|---|---|---|---|---|")
for r in rows:
    peer = f"{num(r['peer'])} {r['unit']} ({r['peer_name']})" if r["peer"] is not None else r["peer_name"]
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
    print(f"| {r['measure']} | {num(r['runp'])} {r['unit']} | {peer} | {ratio} | {r['goal']} |")
if failed:
    print(f"\nFAILED: {' '.join(failed)}")
PY
echo "bench-all: wrote $OUT" >&2
[ "${#failed[@]}" -eq 0 ]
