#!/usr/bin/env bash
# Builds runp's container image without a network: the stripped runp binary, the CNI plugins
# it calls (bridge, host-local, portmap, loopback from Debian's containernetworking-plugins),
# iptables (with its xtables modules) and busybox, each with the shared libraries it loads,
# assembled into one layer with umoci and written as an OCI layout and a docker-archive tar.
#
#   entrypoint  runp --root /var/lib/runp agent --runtime=process --config /etc/runp/agent.yaml
#   volumes     /var/lib/runp (state, images), /var/log/pods, /etc/runp/manifests
#   health      runp health   (podman run --health-cmd "runp health" ...)
#
# Usage: scripts/build-image.sh [OUT]   (default target/image; RUNP_BIN picks the binary,
#        default target/release/runp, built if missing). Writes OUT/oci (tag runp:VERSION) and
#        OUT/runp-image.tar (docker-archive, runp:VERSION). Needs umoci, skopeo, busybox-static,
#        iptables, containernetworking-plugins (installed with apt-get when missing, as root).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-target/image}")
need=""
for pair in umoci:umoci skopeo:skopeo busybox:busybox-static xtables-nft-multi:iptables; do
  command -v "${pair%%:*}" >/dev/null || need="$need ${pair#*:}"
done
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || need="$need containernetworking-plugins"
if [ -n "$need" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >&2
fi
runp=${RUNP_BIN:-target/release/runp}
if [ ! -x "$runp" ]; then cargo build --release --quiet; fi
version=$("$runp" --version | awk '{print $2}')
cni_dir=/opt/cni/bin
[ -x "$cni_dir/bridge" ] || cni_dir=/usr/lib/cni

stage=$(mktemp -d /tmp/runp-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
root=$stage/rootfs
mkdir -p "$root"/{usr/local/bin,opt/cni/bin,bin,sbin,etc/runp/manifests,var/lib/runp,var/log/pods,tmp,run,proc,sys,dev}
chmod 1777 "$root/tmp"

# Copies a binary and every shared library it links (ldd), keeping their paths.
with_libs() {
  local file=$1 dest=$2
  mkdir -p "$(dirname "$root$dest")"
  cp -L "$file" "$root$dest"
  ldd "$file" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
    [ -e "$root$lib" ] || { mkdir -p "$(dirname "$root$lib")"; cp -L "$lib" "$root$lib"; }
  done
}

# runp, stripped: symbols stay in the build's binary for profiling.
strip -o "$stage/runp" "$runp"
with_libs "$stage/runp" /usr/local/bin/runp
for plugin in bridge host-local portmap loopback; do
  with_libs "$cni_dir/$plugin" "/opt/cni/bin/$plugin"
done
# iptables: the multi-call binary, its names, and the extension modules it dlopens.
xt=$(command -v xtables-nft-multi)
with_libs "$xt" /usr/sbin/xtables-nft-multi
for name in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -sf xtables-nft-multi "$root/usr/sbin/$name"
done
# Where iptables was built to look for them (/usr/lib/...): on a merged-/usr host ldd names
# /lib/..., a symlink there but a separate directory in the image.
xtdir=$(realpath "$(dirname "$(ldd "$xt" | grep -o '/[^ ]*libxtables[^ ]*' | head -1)")")/xtables
if [ -d "$xtdir" ]; then
  mkdir -p "$root$xtdir"
  for mod in "$xtdir"/*.so; do with_libs "$mod" "$mod"; done
fi
# A shell and the usual tools for `podman exec`.
cp "$(command -v busybox)" "$root/bin/busybox"
for tool in sh ls cat ps mount umount ip kill sleep mkdir rm grep sed tail head wc; do
  ln -sf busybox "$root/bin/$tool"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
# Container logs on their own volume.
"$stage/runp" config default | sed 's|^# podLogsDir: /var/log/pods |podLogsDir: /var/log/pods   |' \
  >"$root/etc/runp/agent.yaml"
grep -q '^podLogsDir: /var/log/pods' "$root/etc/runp/agent.yaml"

rm -rf "$out"
mkdir -p "$out"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:runp"
umoci insert --image "$out/oci:runp" "$root" /
umoci config --image "$out/oci:runp" --tag "$version" \
  --config.entrypoint /usr/local/bin/runp \
  --config.entrypoint --root --config.entrypoint /var/lib/runp \
  --config.cmd agent --config.cmd --runtime=process \
  --config.cmd --config --config.cmd /etc/runp/agent.yaml \
  --config.env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env RUNP_LOG=info \
  --config.volume /var/lib/runp --config.volume /var/log/pods --config.volume /etc/runp/manifests \
  --config.stopsignal SIGTERM \
  --config.label org.opencontainers.image.title=runp \
  --config.label org.opencontainers.image.version="$version" \
  --config.label io.runp.healthcheck="runp health" \
  --author runp --os linux --architecture amd64
umoci rm --image "$out/oci:runp"
umoci gc --layout "$out/oci"
skopeo copy --quiet "oci:$out/oci:$version" "docker-archive:$out/runp-image.tar:runp:$version"
size=$(du -h "$out/runp-image.tar" | cut -f1)
echo "build-image: runp:$version -> $out/oci, $out/runp-image.tar ($size; runp stripped: $(du -h "$stage/runp" | cut -f1))" >&2
