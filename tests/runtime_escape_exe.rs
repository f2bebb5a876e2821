//! The container cannot reach the runtime's binary or the host's files through what the runtime
//! leaves behind: no /proc/PID/exe of runp's init, shim or exec helper is writable from inside
//! (CVE-2019-5736 class), and neither the container nor an exec'd process inherits a host file
//! descriptor or working directory (CVE-2024-21626 class).

#[path = "support/runtime.rs"]
mod support;

use sha2::{Digest, Sha256};
use support::*;

/// Prints each process's exe link and whether an append to it worked, the open fds and cwd.
const PROBE: &str = r#"
for p in /proc/[0-9]*; do
  [ "$p" = /proc/self ] && continue
  exe=$(readlink "$p/exe" 2>/dev/null) || continue
  if (echo x >> "$p/exe") 2>/dev/null; then echo "wrote $p $exe"; fi
  echo "exe $p $exe"
done
for fd in /proc/self/fd/*; do echo "fd ${fd##*/} $(readlink "$fd")"; done
echo "cwd $(readlink /proc/self/cwd)"
"#;

fn digest(path: &str) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

/// Checks the probe's output: only the container's own busybox is writable, fds 0-2 (and the
/// one the shell's glob reads) point at no host file, the cwd is the container's.
fn check(output: &str, cwd: &str) {
    assert!(output.contains("exe /proc/"), "the probe ran: {output}");
    for line in output.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("wrote"), Some(pid), exe) => assert_eq!(
                exe,
                Some("/bin/busybox"),
                "{pid}'s exe was writable: {output}"
            ),
            (Some("exe"), Some(_), Some(exe)) => assert!(
                !exe.contains("runp") && !exe.starts_with("/memfd"),
                "a runtime binary is visible in the container: {line}"
            ),
            (Some("fd"), Some(fd), target) => {
                let fd: u32 = fd.parse().unwrap();
                let target = target.unwrap_or_default();
                // fd 3 is the shell's glob of /proc/self/fd, closed before readlink runs.
                let ok = (fd == 3 && target.is_empty())
                    || target.starts_with("pipe:")
                    || target.starts_with("/dev/")
                    || target.starts_with("/proc/")
                    || target.starts_with("socket:")
                    || target.starts_with("anon_inode:");
                assert!(fd <= 3 && ok, "inherited fd {fd} -> {target}: {output}");
            }
            (Some("cwd"), Some(dir), _) => assert_eq!(dir, cwd, "{output}"),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_runtime_binary_or_host_fd_reaches_the_container() {
    let Some(env) = Env::for_test("no_runtime_binary_or_host_fd_reaches_the_container").await
    else {
        return;
    };
    let runp = env!("CARGO_BIN_EXE_runp");
    let before = digest(runp);
    let pod = env.pod("exe").await;
    let script = format!("{PROBE}\necho done; exec sleep 1000");
    let mut c = shell("probe", &script);
    c.working_dir = "/tmp".into();
    let id = env.run(&pod, c).await;
    let lines = env.log_lines("exe", "probe", 1).await;
    let log = std::fs::read_to_string(env.logs().join("exe/probe.log")).unwrap();
    let output: String = parse_cri_log(&log)
        .into_iter()
        .map(|(_, _, text)| text + "\n")
        .collect();
    assert!(!lines.is_empty());
    check(&output, "/tmp");

    // The same from an exec'd process (it enters the running container's namespaces).
    let exec = env.exec(&id, &["sh", "-c", PROBE]).await;
    assert_eq!(
        exec.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    check(&String::from_utf8_lossy(&exec.stdout), "/tmp");

    assert_eq!(before, digest(runp), "the runp binary changed");
    env.cleanup().await;
}
