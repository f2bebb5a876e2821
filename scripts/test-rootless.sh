#!/usr/bin/env bash
# Re-runs the runtime-facing integration tests (runtime_*, jail_*, image_*, agent_*, and the CRI
# pull conformance test cri_conformance_pull) as mapped root in a
# new user + mount namespace, where cgroups are not writable and some things need rootless
# handling. Tests that need real root print "SKIP: <test>: needs ..." there. Fails if any fails.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! unshare --user --map-root-user --mount true 2>/dev/null; then
  echo "test-rootless: user namespaces are not available here" >&2
  exit 1
fi
# Fixture images need tools (and maybe apt) outside the namespace: build them first.
if [ -x scripts/build-fixtures.sh ]; then
  scripts/build-fixtures.sh
fi

# Build the test binaries out here; list the runtime-facing ones.
mapfile -t bins < <(
  cargo test --no-run --message-format=json --test 'runtime_*' --test 'jail_*' --test 'image_*' --test 'agent_*' \
    --test cri_conformance_pull 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m.get("target", {}).get("kind", []):
        print(m["target"]["name"] + " " + m["executable"])
'
)
if [ "${#bins[@]}" -eq 0 ]; then
  echo "test-rootless: no test binaries built" >&2
  exit 1
fi

failed=()
for entry in "${bins[@]}"; do
  name="${entry%% *}"
  exe="${entry#* }"
  echo "=== $name (rootless)" >&2
  # CARGO_MANIFEST_DIR and the binary path are what the tests use to find fixtures and runp.
  if ! CARGO_MANIFEST_DIR="$PWD" unshare --user --map-root-user --mount --fork -- \
      "$exe" --test-threads=2 2>&1; then
    failed+=("$name")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "test-rootless: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test-rootless: all ${#bins[@]} test binaries passed in a user namespace" >&2
