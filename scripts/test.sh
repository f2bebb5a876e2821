#!/usr/bin/env bash
# The whole test suite: builds the fixtures, runs every test as the current user (root in CI),
# then re-runs the runtime-facing tests inside a rootless user namespace.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/build-fixtures.sh ]; then scripts/build-fixtures.sh; fi
cargo test --all-targets
if [ -x scripts/test-rootless.sh ]; then scripts/test-rootless.sh; fi
