#!/usr/bin/env bash
# Builds the benchmarks' larger image once: rootfs-fixtures/build/bench-python-oci.tar, one
# ~54 MB layer of the host's /usr/lib/python3.* (thousands of small files) as an OCI tarball
# named bench.test/python:1. Does nothing when it exists or the host has no python3 tree.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="$PWD/rootfs-fixtures/build"
PY_SRC="$(ls -d /usr/lib/python3.* 2>/dev/null | head -n1 || true)"
if [ -z "$PY_SRC" ] || [ -f "$BUILD/bench-python-oci.tar" ]; then exit 0; fi
WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/runp-bench-image.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
layout="$WORK/python-layout"
umoci init --layout "$layout" >/dev/null
umoci new --image "$layout:python" >/dev/null
tar -cf "$WORK/python.tar" -C / --sort=name "${PY_SRC#/}"
umoci raw add-layer --no-history --image "$layout:python" "$WORK/python.tar" 2>/dev/null
skopeo --insecure-policy copy --quiet "oci:$layout:python" "oci:$WORK/python-oci:bench.test/python:1"
tar -cf "$BUILD/bench-python-oci.tar.tmp" -C "$WORK/python-oci" .
mv "$BUILD/bench-python-oci.tar.tmp" "$BUILD/bench-python-oci.tar"
