#!/usr/bin/env bash
# Builds the test images into rootfs-fixtures/build/ (see rootfs-fixtures/README.md for the
# catalogue). Idempotent and quick when up to date: a stamp records the inputs (this script and
# the busybox binary); outputs are replaced only when a full build succeeded.
# Needs busybox-static, umoci and skopeo (and, to build runp, libseccomp-dev and pkg-config);
# installs them with apt-get when missing and root.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="$PWD/rootfs-fixtures/build"
BUSYBOX=/bin/busybox
mkdir -p "$BUILD"

# Parallel callers (tests) wait for one builder.
exec 9>"$BUILD/.lock"
flock 9

need_tools() {
  local missing=()
  command -v umoci >/dev/null || missing+=(umoci)
  command -v skopeo >/dev/null || missing+=(skopeo)
  { [ -x "$BUSYBOX" ] && "$BUSYBOX" --list-full >/dev/null 2>&1; } || missing+=(busybox-static)
  # Not for the fixtures: libcontainer's seccomp support links libseccomp (found by pkg-config).
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  pkg-config --exists libseccomp 2>/dev/null || missing+=(libseccomp-dev)
  echo "${missing[@]:-}"
}

missing="$(need_tools)"
if [ -n "$missing" ]; then
  real_root=false
  if [ "$(id -u)" = 0 ] && [ "$(tr -s ' ' </proc/self/uid_map | sed 's/^ //')" = "0 0 4294967295" ]; then
    real_root=true
  fi
  if $real_root && command -v apt-get >/dev/null; then
    echo "build-fixtures: installing $missing" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2
  else
    echo "build-fixtures: missing $missing; install them (apt-get install $missing) or run this script as root" >&2
    exit 1
  fi
fi

stamp_value="$(cat "$0" "$BUSYBOX" | sha256sum | cut -d' ' -f1)"
if [ -f "$BUILD/.stamp" ] && [ "$(cat "$BUILD/.stamp")" = "$stamp_value" ]; then
  exit 0
fi

WORK="$(mktemp -d "$BUILD/.work.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
OUT="$WORK/out"
mkdir -p "$OUT"
T_BASE=1700000000      # 2023-11-14: mtime of most entries
T_B=1600000000         # 2020-09-13: mtime of /opt/data/b, to check mtimes survive
CREATED=2024-01-01T00:00:00Z

# tar with fixed ordering and numeric owners, PAX format (keeps large ids and mtimes exact).
mktar() { # mktar OUT.tar DIR OWNER GROUP PATHS... (appends when OUT.tar exists)
  local out="$1" dir="$2" owner="$3" group="$4"; shift 4
  local mode=-c; [ -f "$out" ] && mode=-r
  tar "$mode" -f "$out" -C "$dir" --format=pax --sort=name --numeric-owner \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    --owner="$owner" --group="$group" --no-recursion "$@"
}

# --- layer 1: busybox, applet symlinks, users -------------------------------------------------
L1="$WORK/l1"
mkdir -p "$L1"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,home/app,proc,sys,dev,var}
cp "$BUSYBOX" "$L1/bin/busybox"
chmod 0755 "$L1/bin/busybox"
"$BUSYBOX" --list-full | while read -r applet; do
  [ "$applet" = bin/busybox ] && continue
  mkdir -p "$L1/$(dirname "$applet")"
  ln -sf /bin/busybox "$L1/$applet"
done
cat >"$L1/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
app:x:1000:1000:app:/home/app:/bin/sh
PASSWD
cat >"$L1/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
app:x:1000:
GROUP
chmod 0700 "$L1/root"
chmod 1777 "$L1/tmp"
find "$L1" -exec touch -h -d "@$T_BASE" {} +
( cd "$L1" && find . ! -path ./home/app | sort ) >"$WORK/l1.list"
mktar "$WORK/l1.tar" "$L1" 0 0 -T "$WORK/l1.list"
mktar "$WORK/l1.tar" "$L1" 1000 1000 ./home/app

# --- layer 2: /opt/data and /opt/cfg with a hardlink, a symlink, another owner ----------------
L2="$WORK/l2"
mkdir -p "$L2/opt/data" "$L2/opt/cfg"
echo alpha >"$L2/opt/data/a"
echo bravo >"$L2/opt/data/b"
chmod 0640 "$L2/opt/data/b"
ln "$L2/opt/data/b" "$L2/opt/data/b-hard"
ln -s b "$L2/opt/data/b-sym"
echo x-ray >"$L2/opt/cfg/x"
echo yankee >"$L2/opt/cfg/y"
find "$L2" -exec touch -h -d "@$T_BASE" {} +
touch -d "@$T_B" "$L2/opt/data/b"
mktar "$WORK/l2.tar" "$L2" 0 0 ./opt ./opt/data ./opt/data/a ./opt/data/b-sym ./opt/cfg ./opt/cfg/x ./opt/cfg/y
mktar "$WORK/l2.tar" "$L2" 1000 1000 ./opt/data/b ./opt/data/b-hard

# --- layer 3: whiteout /opt/data/a, opaque /opt/cfg with a new file z -------------------------
L3="$WORK/l3"
mkdir -p "$L3/opt/data" "$L3/opt/cfg"
: >"$L3/opt/data/.wh.a"
: >"$L3/opt/cfg/.wh..wh..opq"
echo zulu >"$L3/opt/cfg/z"
find "$L3" -exec touch -h -d "@$T_BASE" {} +
mktar "$WORK/l3.tar" "$L3" 0 0 ./opt ./opt/data ./opt/data/.wh.a ./opt/cfg ./opt/cfg/.wh..wh..opq ./opt/cfg/z

# --- extra layer (second image sharing layer 1) ------------------------------------------------
LX="$WORK/lx"
mkdir -p "$LX/opt/extra"
echo "hello from extra" >"$LX/opt/extra/hello"
find "$LX" -exec touch -h -d "@$T_BASE" {} +
mktar "$WORK/lx.tar" "$LX" 0 0 ./opt ./opt/extra ./opt/extra/hello

# --- images -----------------------------------------------------------------------------------
LAYOUT="$WORK/layout"
umoci init --layout "$LAYOUT"
PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
umoci new --image "$LAYOUT:busybox"
for l in l1 l2 l3; do
  umoci raw add-layer --history.created "$CREATED" --history.created_by "fixture $l" --image "$LAYOUT:busybox" "$WORK/$l.tar"
done
umoci config --image "$LAYOUT:busybox" --no-history --created "$CREATED" --author runp \
  --config.env "$PATH_ENV" --config.cmd sh --config.workingdir / \
  --config.label org.runp.fixture=busybox --config.stopsignal SIGTERM

umoci new --image "$LAYOUT:extra"
for l in l1 lx; do
  umoci raw add-layer --history.created "$CREATED" --history.created_by "fixture $l" --image "$LAYOUT:extra" "$WORK/$l.tar"
done
umoci config --image "$LAYOUT:extra" --no-history --created "$CREATED" --author runp \
  --config.env "$PATH_ENV" --config.user app --config.workingdir /home/app \
  --config.entrypoint /bin/sh --config.entrypoint -c --config.cmd "cat /opt/extra/hello" \
  --config.label org.runp.fixture=busybox-extra --config.stopsignal SIGUSR1

copy() { skopeo --insecure-policy copy --quiet "$@"; }
copy "oci:$LAYOUT:busybox" "oci:$OUT/busybox-oci:docker.io/library/busybox:latest"
copy "oci:$LAYOUT:busybox" "oci:$OUT/busybox-oci:runp.test/busybox:1"
tar -cf "$OUT/busybox-oci.tar" -C "$OUT/busybox-oci" --sort=name --numeric-owner \
  --owner=0 --group=0 --mtime="@$T_BASE" .
copy "oci:$LAYOUT:busybox" "docker-archive:$OUT/busybox-docker.tar:docker.io/library/busybox:latest" \
  --additional-tag runp.test/busybox:1
copy "oci:$LAYOUT:extra" "oci:$OUT/busybox-extra-oci:runp.test/busybox-extra:1"

# Replace the outputs only now that everything was built.
for name in busybox-oci busybox-oci.tar busybox-docker.tar busybox-extra-oci; do
  rm -rf "${BUILD:?}/$name"
  mv "$OUT/$name" "$BUILD/$name"
done
echo "$stamp_value" >"$BUILD/.stamp"
echo "build-fixtures: built images in $BUILD" >&2
