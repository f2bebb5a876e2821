//! What the manifest directory currently defines, and the pod events a new scan implies. Pure:
//! it is fed file contents and returns events.
//!
//! A file is taken or refused as a whole. A file that becomes invalid keeps its last valid
//! version running (an editor saving a half-written file must not kill pods) and is reported;
//! a file that disappears removes its pods. Objects defined twice across files are refused in
//! the later file (by path order), which is reported.

use super::parse::{ManifestContent, parse_manifest};
use crate::kubelet::podconfig::PodEvent;
use crate::kubelet::podconfig::store::{ObjectSet, object_key};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A file as read by a scan.
#[derive(Clone, Debug)]
pub enum FileRead {
    Content(Vec<u8>),
    Unreadable(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file (or its new version) is not used.
    Error,
    /// The file is used; something in it was ignored.
    Warning,
}

/// A problem with one manifest file, for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ManifestProblem {
    pub file: PathBuf,
    pub severity: Severity,
    pub message: String,
}

#[derive(Default)]
struct FileEntry {
    digest: Option<[u8; 32]>,
    /// The last valid content, kept while the file is invalid.
    good: Option<ManifestContent>,
    errors: Vec<String>,
}

/// Pods and objects the directory defines, by file.
#[derive(Default)]
pub struct SourceState {
    files: BTreeMap<PathBuf, FileEntry>,
    conflicts: BTreeMap<PathBuf, Vec<String>>,
    pods: BTreeMap<String, Pod>,
    pod_files: BTreeMap<String, PathBuf>,
    objects: ObjectSet,
}

/// The outcome of a scan.
#[derive(Debug, Default)]
pub struct Changes {
    /// Removes first, then `ObjectsChanged`, then upserts.
    pub events: Vec<PodEvent>,
    /// The new ConfigMaps/Secrets, when they changed.
    pub objects: Option<ObjectSet>,
}

impl SourceState {
    /// Takes a full scan of the directory (every manifest file present, by path).
    pub fn apply_scan(
        &mut self,
        scan: BTreeMap<PathBuf, FileRead>,
        node_name: Option<&str>,
    ) -> Changes {
        let before = self.files.len();
        self.files.retain(|path, _| scan.contains_key(path));
        let mut changed = self.files.len() != before;
        for (path, read) in scan {
            let known = self.files.contains_key(&path);
            let entry = self.files.entry(path.clone()).or_default();
            changed |= update_entry(&path, entry, read, node_name) || !known;
        }
        // The periodic rescan of an unchanged directory: nothing to merge (with hundreds of
        // pods the merge and its comparisons were most of an idle agent's manifest work).
        if !changed {
            return Changes::default();
        }
        let (pods, order, objects) = self.merge();
        let mut changes = Changes::default();
        for uid in self.pods.keys() {
            if !pods.contains_key(uid) {
                changes.events.push(PodEvent::Remove { uid: uid.clone() });
            }
        }
        if objects != self.objects {
            changes.events.push(PodEvent::ObjectsChanged);
            changes.objects = Some(objects.clone());
        }
        for (uid, _) in &order {
            if let Some(pod) = pods.get(uid)
                && self.pods.get(uid) != Some(pod)
            {
                changes.events.push(PodEvent::Upsert(Box::new(pod.clone())));
            }
        }
        self.pods = pods;
        self.pod_files = order.into_iter().collect();
        self.objects = objects;
        changes
    }

    /// Combines the files in path order; a file redefining what an earlier one defines is
    /// refused whole. Returns pods by UID, `(uid, file)` in file order, and the objects.
    fn merge(&mut self) -> (BTreeMap<String, Pod>, Vec<(String, PathBuf)>, ObjectSet) {
        let mut claimed: BTreeMap<(&'static str, String, String), &Path> = BTreeMap::new();
        let mut pods = BTreeMap::new();
        let mut order = Vec::new();
        let mut objects = ObjectSet::default();
        let mut conflicts = BTreeMap::new();
        for (path, entry) in &self.files {
            let Some(content) = &entry.good else { continue };
            let keys = content_keys(content);
            let clashes: Vec<String> = keys
                .iter()
                .filter_map(|key| {
                    claimed.get(key).map(|other| {
                        format!(
                            "{} {}/{} is already defined in {}",
                            key.0,
                            key.1,
                            key.2,
                            other.display()
                        )
                    })
                })
                .collect();
            if !clashes.is_empty() {
                conflicts.insert(path.clone(), clashes);
                continue;
            }
            for key in keys {
                claimed.insert(key, path);
            }
            for pod in &content.pods {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                order.push((uid.clone(), path.clone()));
                pods.insert(uid, pod.clone());
            }
            for cm in &content.config_maps {
                objects.insert_config_map(cm.clone());
            }
            for secret in &content.secrets {
                objects.insert_secret(secret.clone());
            }
        }
        for (path, clashes) in &conflicts {
            if self.conflicts.get(path) != Some(clashes) {
                for clash in clashes {
                    tracing::warn!(file = %path.display(), "manifest refused: {clash}");
                }
            }
        }
        self.conflicts = conflicts;
        (pods, order, objects)
    }

    /// Current problems, by file.
    pub fn problems(&self) -> Vec<ManifestProblem> {
        let mut out = Vec::new();
        for (path, entry) in &self.files {
            let problem = |severity, message: &String| ManifestProblem {
                file: path.clone(),
                severity,
                message: message.clone(),
            };
            let kept = if entry.good.is_some() {
                " (the last valid version keeps running)"
            } else {
                ""
            };
            for error in &entry.errors {
                let mut p = problem(Severity::Error, error);
                p.message.push_str(kept);
                out.push(p);
            }
            for clash in self.conflicts.get(path).into_iter().flatten() {
                out.push(problem(Severity::Error, clash));
            }
            let warnings = entry.good.iter().flat_map(|g| &g.warnings);
            out.extend(warnings.map(|w| problem(Severity::Warning, w)));
        }
        out
    }

    /// The file a pod (by UID) comes from.
    pub fn pod_file(&self, uid: &str) -> Option<&Path> {
        self.pod_files.get(uid).map(PathBuf::as_path)
    }

    /// Current pods by UID.
    pub fn pods(&self) -> &BTreeMap<String, Pod> {
        &self.pods
    }
}

/// Everything a file defines, as `(kind, namespace, name)`, plus pod UIDs.
fn content_keys(content: &ManifestContent) -> Vec<(&'static str, String, String)> {
    let mut keys = Vec::new();
    for pod in &content.pods {
        if let Some((ns, name)) = object_key(&pod.metadata) {
            keys.push(("pod", ns, name));
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        keys.push(("pod with uid", String::new(), uid));
    }
    for cm in &content.config_maps {
        if let Some((ns, name)) = object_key(&cm.metadata) {
            keys.push(("configMap", ns, name));
        }
    }
    for secret in &content.secrets {
        if let Some((ns, name)) = object_key(&secret.metadata) {
            keys.push(("secret", ns, name));
        }
    }
    keys
}

/// Updates a file's entry from what was read; false when it is as before.
fn update_entry(
    path: &Path,
    entry: &mut FileEntry,
    read: FileRead,
    node_name: Option<&str>,
) -> bool {
    match read {
        FileRead::Unreadable(reason) => {
            let changed = entry.digest.is_some() || entry.errors != [reason.clone()];
            if entry.errors != [reason.clone()] {
                tracing::warn!(file = %path.display(), "cannot read manifest: {reason}");
            }
            entry.digest = None;
            entry.errors = vec![reason];
            changed
        }
        FileRead::Content(bytes) => {
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            if entry.digest == Some(digest) {
                return false;
            }
            entry.digest = Some(digest);
            match parse_manifest(path, &bytes, node_name) {
                Ok(content) => {
                    for warning in &content.warnings {
                        tracing::warn!(file = %path.display(), "manifest: {warning}");
                    }
                    entry.good = Some(content);
                    entry.errors.clear();
                }
                Err(errors) => {
                    for error in &errors {
                        tracing::warn!(file = %path.display(), "invalid manifest: {error}");
                    }
                    entry.errors = errors;
                }
            }
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_yaml(name: &str, image: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
        )
    }

    fn scan(files: &[(&str, &str)]) -> BTreeMap<PathBuf, FileRead> {
        files
            .iter()
            .map(|(p, c)| (PathBuf::from(p), FileRead::Content(c.as_bytes().to_vec())))
            .collect()
    }

    /// Events as short strings: "+name", "-uid-prefix", "objects".
    fn summary(changes: &Changes, state: &SourceState) -> Vec<String> {
        changes
            .events
            .iter()
            .map(|e| match e {
                PodEvent::Upsert(pod) => {
                    format!("+{}", pod.metadata.name.clone().unwrap_or_default())
                }
                PodEvent::Remove { uid } => {
                    assert!(!state.pods.contains_key(uid));
                    "-".to_string()
                }
                PodEvent::ObjectsChanged => "objects".to_string(),
            })
            .collect()
    }

    #[test]
    fn scans_produce_minimal_events() {
        let mut state = SourceState::default();
        let a = pod_yaml("a", "busybox");
        let b = pod_yaml("b", "busybox");
        let a2 = a.replace("busybox", "busybox:1.36");
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {k: v}\n";
        type Step<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>);
        let steps: Vec<Step> = vec![
            (vec![("/m/a.yaml", &a), ("/m/b.yaml", &b)], vec!["+a", "+b"]),
            (vec![("/m/a.yaml", &a), ("/m/b.yaml", &b)], vec![]),
            // Same content, new digest-equal text: nothing. Changed spec: upsert.
            (vec![("/m/a.yaml", &a2), ("/m/b.yaml", &b)], vec!["+a"]),
            // File removed: its pod goes.
            (vec![("/m/a.yaml", &a2)], vec!["-"]),
            // A ConfigMap appears.
            (vec![("/m/a.yaml", &a2), ("/m/c.yaml", cm)], vec!["objects"]),
            (vec![("/m/a.yaml", &a2), ("/m/c.yaml", cm)], vec![]),
            (vec![("/m/a.yaml", &a2)], vec!["objects"]),
        ];
        for (i, (files, expected)) in steps.into_iter().enumerate() {
            let changes = state.apply_scan(scan(&files), None);
            assert_eq!(summary(&changes, &state), expected, "step {i}");
        }
    }

    #[test]
    fn broken_files_keep_their_last_valid_version_and_are_reported() {
        let mut state = SourceState::default();
        let a = pod_yaml("a", "busybox");
        let b = pod_yaml("b", "busybox");
        state.apply_scan(scan(&[("/m/a.yaml", &a), ("/m/b.yaml", &b)]), None);
        let broken = a.replace("image: busybox", "image: [");
        let changes = state.apply_scan(scan(&[("/m/a.yaml", &broken), ("/m/b.yaml", &b)]), None);
        assert!(changes.events.is_empty(), "{:?}", changes.events);
        let problems = state.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].file, PathBuf::from("/m/a.yaml"));
        assert_eq!(problems[0].severity, Severity::Error);
        assert!(
            problems[0]
                .message
                .contains("last valid version keeps running")
        );
        // Fixed: problem gone, a change is applied.
        let fixed = a.replace("busybox", "busybox:2");
        let changes = state.apply_scan(scan(&[("/m/a.yaml", &fixed), ("/m/b.yaml", &b)]), None);
        assert_eq!(summary(&changes, &state), vec!["+a"]);
        assert!(state.problems().is_empty());
        // A new file that never was valid defines nothing.
        let changes = state.apply_scan(
            scan(&[
                ("/m/a.yaml", &fixed),
                ("/m/b.yaml", &b),
                ("/m/c.yaml", "kind: ["),
            ]),
            None,
        );
        assert!(changes.events.is_empty());
        assert_eq!(state.problems()[0].file, PathBuf::from("/m/c.yaml"));
        assert!(!state.problems()[0].message.contains("keeps running"));
    }

    #[test]
    fn unreadable_files_are_reported_and_retried() {
        let mut state = SourceState::default();
        let a = pod_yaml("a", "busybox");
        state.apply_scan(scan(&[("/m/a.yaml", &a)]), None);
        let mut unreadable = BTreeMap::new();
        unreadable.insert(
            PathBuf::from("/m/a.yaml"),
            FileRead::Unreadable("permission denied".into()),
        );
        assert!(state.apply_scan(unreadable, None).events.is_empty());
        assert!(state.problems()[0].message.contains("permission denied"));
        // Readable again with the same content: no event, problem cleared.
        assert!(
            state
                .apply_scan(scan(&[("/m/a.yaml", &a)]), None)
                .events
                .is_empty()
        );
        assert!(state.problems().is_empty());
    }

    #[test]
    fn duplicates_across_files_are_refused_in_the_later_file() {
        let mut state = SourceState::default();
        let a = pod_yaml("a", "busybox");
        let changes = state.apply_scan(scan(&[("/m/1.yaml", &a), ("/m/2.yaml", &a)]), None);
        assert_eq!(summary(&changes, &state), vec!["+a"]);
        let problems = state.problems();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].file, PathBuf::from("/m/2.yaml"));
        assert!(
            problems[0]
                .message
                .contains("pod default/a is already defined in /m/1.yaml")
        );
        let uid = state.pods().keys().next().cloned().unwrap();
        assert_eq!(state.pod_file(&uid), Some(Path::new("/m/1.yaml")));
        // The first file goes away: the second one's pod takes over (new UID: new source).
        let changes = state.apply_scan(scan(&[("/m/2.yaml", &a)]), None);
        assert_eq!(summary(&changes, &state), vec!["-", "+a"]);
        assert!(state.problems().is_empty());
    }
}
