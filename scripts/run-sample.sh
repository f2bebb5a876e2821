#!/usr/bin/env bash
# The main job on the embedded default: builds runp and the fixture images, loads busybox into
# a private image store, runs `runp agent --runtime=process` on the sample manifests
# (rootfs-fixtures/pods), shows the pod converging (status, logs, exec), then removes the
# manifests so the agent stops the pod gracefully, and stops the agent.
# Usage: scripts/run-sample.sh [--keep]   (--keep leaves the agent and the pod running)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${RUNP_SAMPLE_ROOT:-/tmp/runp-sample}
keep=${1:-}

scripts/build-fixtures.sh
cargo build --quiet
runp=(target/debug/runp --root "$root")

if [ -f "$root/agent.pid" ] && kill -0 "$(cat "$root/agent.pid")" 2>/dev/null; then
  echo "an agent from an earlier run is still running (pid $(cat "$root/agent.pid")); stop it first" >&2
  exit 1
fi
mkdir -p "$root/manifests"
"${runp[@]}" image load rootfs-fixtures/build/busybox-oci.tar
cp rootfs-fixtures/pods/*.yaml "$root/manifests/"

"${runp[@]}" agent --manifests "$root/manifests" >"$root/agent.log" 2>&1 &
agent=$!
echo "$agent" >"$root/agent.pid"
stop_agent() { kill -TERM "$agent" 2>/dev/null || true; wait "$agent" 2>/dev/null || true; }
trap 'echo "see $root/agent.log" >&2; stop_agent' ERR

echo "== waiting for pod default/hello to run (agent log: $root/agent.log)"
for _ in $(seq 1 60); do
  if "${runp[@]}" pods 2>/dev/null | grep -q 'hello .*Running'; then break; fi
  sleep 1
done
sleep 3
"${runp[@]}" pods -o wide
echo "== containers"
"${runp[@]}" ps
echo "== logs of hello/web"
"${runp[@]}" logs hello -c web
echo "== exec in hello/web"
"${runp[@]}" exec hello -c web -- sh -c 'echo "hostname: $(hostname)"; ps; cat /work/index.html'

if [ "$keep" = "--keep" ]; then
  echo "agent left running (pid $agent); stop it with: kill $agent; pods keep running until their manifests are removed"
  trap - ERR
  exit 0
fi
echo "== removing the manifests: the agent stops the pod gracefully"
rm -f "$root/manifests/"*.yaml
for _ in $(seq 1 60); do
  if ! "${runp[@]}" pods 2>/dev/null | grep -q hello; then break; fi
  sleep 1
done
"${runp[@]}" pods
stop_agent
trap - ERR
rm -f "$root/agent.pid"
echo "== done"
