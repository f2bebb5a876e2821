//! What a process sees from inside a container.

#[path = "support/jail.rs"]
mod support;

use support::*;

/// Docker's default capability set as a /proc/<pid>/status mask.
fn docker_default_mask() -> u64 {
    use caps::Capability::*;
    [
        CAP_CHOWN,
        CAP_DAC_OVERRIDE,
        CAP_FSETID,
        CAP_FOWNER,
        CAP_MKNOD,
        CAP_NET_RAW,
        CAP_SETGID,
        CAP_SETUID,
        CAP_SETFCAP,
        CAP_SETPCAP,
        CAP_NET_BIND_SERVICE,
        CAP_SYS_CHROOT,
        CAP_KILL,
        CAP_AUDIT_WRITE,
    ]
    .iter()
    .fold(0, |mask, cap| mask | cap.bitmask())
}

fn value<'a>(lines: &'a [String], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
}

#[test]
fn the_container_is_confined() {
    if skip_unless(
        "the_container_is_confined",
        is_ns_root(),
        "root (real or mapped)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let host_file = dir.path().join("host-file");
    std::fs::write(&host_file, "untouched").unwrap();
    let host = host_file.display();
    let script = format!(
        "echo caps=$(grep CapEff /proc/self/status | cut -f2); \
         echo bnd=$(grep CapBnd /proc/self/status | cut -f2); \
         echo nnp=$(grep NoNewPrivs /proc/self/status | cut -f2); \
         echo pids=$(ls /proc | grep '^[0-9]' | tr '\\n' ' '); \
         echo fds=$(ls /proc/self/fd | tr '\\n' ' '); \
         echo timer_list=$(wc -c < /proc/timer_list); \
         echo mounted_over=$(grep -c ' /proc/timer_list ' /proc/self/mountinfo); \
         for p in {host} /proc/sys/kernel/hostname /proc/sysrq-trigger; do \
           (echo x > $p) 2>/dev/null && echo WROTE $p; done; \
         mount -t tmpfs t /mnt 2>/dev/null && echo MOUNTED; \
         echo done"
    );
    let run = Run::new(
        dir.path(),
        "confined",
        &base_spec(&rootfs, &["sh", "-c", &script]),
    );
    let (shim, _) = run.start_ok();
    let exit = run.wait_exit(shim);
    let out = stream_lines(&run.log_records(), "stdout");
    assert_eq!(
        exit.exit_code,
        0,
        "{out:?} {:?}",
        stream_lines(&run.log_records(), "stderr")
    );
    assert_eq!(out.last().map(String::as_str), Some("done"), "{out:?}");

    let mask = docker_default_mask();
    assert_eq!(
        u64::from_str_radix(value(&out, "caps"), 16).unwrap(),
        mask,
        "CapEff"
    );
    assert_eq!(
        u64::from_str_radix(value(&out, "bnd"), 16).unwrap(),
        mask,
        "CapBnd"
    );
    assert_eq!(value(&out, "nnp"), "1", "no_new_privs");
    // Its own pid namespace: only a handful of small pids, none of the host's.
    let pids: Vec<u32> = value(&out, "pids")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(pids.contains(&1) && pids.len() <= 6, "{pids:?}");
    assert!(
        !pids.contains(&std::process::id()) && pids.iter().all(|&p| p < 64),
        "{pids:?}"
    );
    // No fd leaked in: stdio plus the directory ls is reading (the container init's own fds are
    // checked from outside in jail_shim.rs).
    assert_eq!(value(&out, "fds"), "0 1 2 3");
    // Masked paths (runc's list; /proc/kcore is not built into this kernel) read as empty.
    assert_eq!(value(&out, "timer_list"), "0", "/proc/timer_list is masked");
    assert_eq!(value(&out, "mounted_over"), "1");
    assert!(
        !out.iter().any(|l| l.starts_with("WROTE") || l == "MOUNTED"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "untouched");
}
