#!/usr/bin/env bash
# Writes what a package of runp ships into DIR: the binary stripped (bin/runp) with its debug
# information split off (debug/runp.debug, found by gdb/perf through the binary's
# .gnu_debuglink), shell completions (bash, zsh, fish) and the man page generated from the clap
# definitions, the systemd unit and the default configuration file.
# Usage: scripts/build-packaging.sh [DIR]   (default target/packaging; builds runp if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/packaging}
runp=${RUNP_BIN:-target/release/runp}
if [ ! -x "$runp" ]; then cargo build --release --quiet; fi
mkdir -p "$out/bin" "$out/debug" "$out/completions" "$out/man/man1" "$out/systemd"
objcopy --only-keep-debug "$runp" "$out/debug/runp.debug"
objcopy --strip-all --add-gnu-debuglink="$out/debug/runp.debug" "$runp" "$out/bin/runp"
size_mb() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "build-packaging: runp $(size_mb "$runp") MiB as built; shipped stripped $(size_mb "$out/bin/runp") MiB + debug file $(size_mb "$out/debug/runp.debug") MiB" >&2
"$runp" completions bash >"$out/completions/runp.bash"
"$runp" completions zsh >"$out/completions/_runp"
"$runp" completions fish >"$out/completions/runp.fish"
"$runp" man >"$out/man/man1/runp.1"
cp scripts/packaging/runp.service "$out/systemd/runp.service"
"$runp" config default >"$out/agent.yaml"
echo "build-packaging: wrote $(find "$out" -type f | wc -l) files to $out" >&2
