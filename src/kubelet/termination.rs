//! Termination messages: a file in the pod directory is mounted at the container's
//! `terminationMessagePath` (podconfig's `termination_log_mount`); after the container exits its content (at most 4096 bytes) becomes
//! the terminated state's message. With `FallbackToLogsOnError`, a failed container that wrote
//! nothing gets the tail of its log instead.

use crate::kubelet::crilog;
use crate::kubelet::runtime_pod::{RunState, RuntimePod};
use std::io::Read;
use std::path::Path;

/// Maximum termination message size.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Fallback-to-logs limits.
pub const FALLBACK_LINES: usize = 80;
pub const FALLBACK_BYTES: usize = 2048;

fn read_capped(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_MESSAGE_BYTES as u64)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Replaces the runtime message of exited containers with their termination message (or log
/// tail, by policy). `log_dir` is the pod's log directory.
pub fn fill_messages(rt: &mut RuntimePod, log_dir: &Path) {
    for view in rt
        .containers
        .iter_mut()
        .filter(|c| c.state == RunState::Exited)
    {
        let written = view
            .termination_message_file
            .as_deref()
            .and_then(|f| read_capped(Path::new(f)))
            .filter(|m| !m.is_empty());
        let message = match written {
            Some(message) => Some(message),
            None if view.exit_code != 0
                && view.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
                && !view.log_path.is_empty() =>
            {
                crilog::tail(
                    &log_dir.join(&view.log_path),
                    FALLBACK_LINES,
                    FALLBACK_BYTES,
                )
                .ok()
                .filter(|m| !m.is_empty())
            }
            None => None,
        };
        if let Some(message) = message {
            view.message = message;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::runtime_pod::ContainerView;

    fn exited(file: Option<&Path>, policy: &str, code: i32) -> ContainerView {
        ContainerView {
            id: "c".into(),
            name: "app".into(),
            state: RunState::Exited,
            exit_code: code,
            message: "runtime says".into(),
            log_path: "app/0.log".into(),
            termination_message_file: file.map(|f| f.to_string_lossy().into_owned()),
            termination_message_policy: Some(policy.into()),
            ..Default::default()
        }
    }

    #[test]
    fn message_from_file_or_log_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("0.termination-log");
        std::fs::write(&file, "").unwrap();
        std::fs::create_dir_all(dir.path().join("logs/app")).unwrap();
        std::fs::write(
            dir.path().join("logs/app/0.log"),
            "2024-01-01T00:00:00Z stderr F fatal: boom\n",
        )
        .unwrap();
        let logs = dir.path().join("logs");
        let run = |view: ContainerView| {
            let mut rt = RuntimePod {
                containers: vec![view],
                ..Default::default()
            };
            fill_messages(&mut rt, &logs);
            rt.containers[0].message.clone()
        };
        // Empty file: the runtime message stays, unless the policy falls back to logs.
        assert_eq!(run(exited(Some(&file), "File", 1)), "runtime says");
        assert_eq!(
            run(exited(Some(&file), "FallbackToLogsOnError", 1)),
            "fatal: boom"
        );
        assert_eq!(
            run(exited(Some(&file), "FallbackToLogsOnError", 0)),
            "runtime says"
        );
        std::fs::write(&file, "x".repeat(5000)).unwrap();
        assert_eq!(run(exited(Some(&file), "File", 1)).len(), MAX_MESSAGE_BYTES);
    }
}
