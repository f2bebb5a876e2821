#!/usr/bin/env bash
# Writes what a package of runp ships besides the binary, generated from the clap definitions:
# shell completions (bash, zsh, fish) and the man page, plus the systemd unit, into DIR.
# Usage: scripts/build-packaging.sh [DIR]   (default target/packaging; builds runp if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/packaging}
runp=${RUNP_BIN:-target/release/runp}
if [ ! -x "$runp" ]; then cargo build --release --quiet; fi
mkdir -p "$out/completions" "$out/man/man1" "$out/systemd"
"$runp" completions bash >"$out/completions/runp.bash"
"$runp" completions zsh >"$out/completions/_runp"
"$runp" completions fish >"$out/completions/runp.fish"
"$runp" man >"$out/man/man1/runp.1"
cp scripts/packaging/runp.service "$out/systemd/runp.service"
"$runp" config default >"$out/agent.yaml"
echo "build-packaging: wrote $(find "$out" -type f | wc -l) files to $out" >&2
