# Sourced by the bench scripts. bench_figure FILE NAME prints the value of the first NAME=VALUE
# word in FILE (a bench binary's machine-readable lines). bench_result records one figure for scripts/bench-all.sh: a JSON
# line appended to $BENCH_RESULTS when that is set (nothing otherwise).
#   bench_result MEASURE RUNP PEER_NAME PEER UNIT GOAL
# RUNP and PEER are numbers in UNIT (PEER may be empty when there is no peer); GOAL is text such
# as "<= 1.5x".
bench_result() {
  [ -n "${BENCH_RESULTS:-}" ] || return 0
  python3 - "$@" >>"$BENCH_RESULTS" <<'PY'
import json, sys
measure, runp, peer_name, peer, unit, goal = sys.argv[1:7]
runp = float(runp)
peer = float(peer) if peer else None
ratio = round(runp / peer, 2) if peer else None
print(json.dumps({"measure": measure, "runp": runp, "peer_name": peer_name, "peer": peer,
                  "unit": unit, "ratio": ratio, "goal": goal}))
PY
}

bench_figure() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | head -n1; }
