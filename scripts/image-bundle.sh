#!/usr/bin/env bash
# Unpacks runp's image (the OCI layout of scripts/build-image.sh) into an OCI runtime bundle for
# crun or runc, privileged as `podman run --privileged` makes a container: every capability this
# shell may grant (its bounding set), no seccomp, AppArmor, masked or read-only paths, no
# rlimits, every device allowed and the host's /dev bound, /sys and the cgroup mounts writable,
# its own network namespace; the image's volumes bound to host directories.
#
# Usage: scripts/image-bundle.sh LAYOUT:TAG BUNDLE STATE LOGS MANIFESTS [AGENT FLAG...]
#   STATE, LOGS, MANIFESTS   host directories for /var/lib/runp, /var/log/pods, /etc/runp/manifests
#   AGENT FLAG...            appended to the image's command (`runp agent ... --config ...`)
#   CGROUP=/path             the container's cgroup (cgroupfs path; default /runp-container)
# Then, as root:  crun run -d --bundle BUNDLE runp; crun exec runp runp pods; crun kill runp TERM
set -euo pipefail
[ $# -ge 5 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
image=$1 bundle=$2 state=$3 logs=$4 manifests=$5
shift 5
umoci unpack --image "$image" "$bundle" >/dev/null
python3 - "$bundle/config.json" "$(grep CapBnd /proc/self/status | cut -f2)" \
  "$(realpath "$state")" "$(realpath "$logs")" "$(realpath "$manifests")" \
  "${CGROUP:-/runp-container}" "$@" <<'PY'
import json, sys

path, bounding, state, logs, manifests, cgroup = sys.argv[1:7]
flags = sys.argv[7:]
# Capability numbers of linux/capability.h, 0 to 40.
NAMES = """CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE
SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME
SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG
WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF CHECKPOINT_RESTORE""".split()
mask = int(bounding, 16)
caps = ["CAP_" + name for bit, name in enumerate(NAMES) if mask >> bit & 1]

spec = json.load(open(path))
process = spec["process"]
process.update(terminal=False, noNewPrivileges=False, args=process["args"] + flags,
               capabilities={"bounding": caps, "effective": caps, "permitted": caps})
for key in ("rlimits", "apparmorProfile"):
    process.pop(key, None)
spec["hostname"] = "runp"
volumes = {"/var/lib/runp": state, "/var/log/pods": logs, "/etc/runp/manifests": manifests}
for mount in spec["mounts"]:
    dest = mount["destination"]
    if dest in volumes:
        mount.update(type="bind", source=volumes[dest], options=["rbind", "rw"])
    elif dest == "/dev":
        mount.update(type="bind", source="/dev", options=["rbind", "nosuid"])
    elif dest in ("/sys", "/sys/fs/cgroup"):
        mount["options"] = [o for o in mount["options"] if o != "ro"] + ["rw"]
linux = spec["linux"]
for key in ("seccomp", "maskedPaths", "readonlyPaths"):
    linux.pop(key, None)
linux["resources"] = {"devices": [{"allow": True, "access": "rwm"}]}
linux["cgroupsPath"] = cgroup
json.dump(spec, open(path, "w"), indent=1)
PY
