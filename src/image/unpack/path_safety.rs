//! Keeping every extracted path inside the target tree.
//!
//! Entry names are normalized lexically (leading `/` and `.` dropped, `..` refused), and the
//! tree is only ever walked with `lstat`: a parent component that is a symlink (or any other
//! non-directory) stops the entry instead of being followed. The tree being extracted into is
//! private to this process (a staging or container directory), so checking with `lstat` before
//! acting is not racy against anyone but the archive itself, which is processed in order.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

/// Normalizes a tar entry name to a path relative to the tree root. `Ok(None)` is the root
/// itself (`./`, `/`). Absolute names are taken relative to the root, as the OCI spec says.
pub fn normalize_entry_name(name: &[u8]) -> Result<Option<PathBuf>, String> {
    let mut rel = PathBuf::new();
    for part in name.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err("the name contains a `..` component".to_string()),
            other => rel.push(OsStr::from_bytes(other)),
        }
    }
    Ok((!rel.as_os_str().is_empty()).then_some(rel))
}

/// True when `rel` is a plain relative path (what [`normalize_entry_name`] produces).
pub fn is_normal_relative(rel: &Path) -> bool {
    rel.components().all(|c| matches!(c, Component::Normal(_)))
}

/// A tree being written, with the directories already proven real (not symlinks) cached.
pub struct SafeTree {
    root: PathBuf,
    real_dirs: HashSet<PathBuf>,
}

/// Why a path cannot be used.
#[derive(Debug)]
pub enum TreeError {
    /// The path would leave the tree or pass through a symlink or non-directory.
    Unsafe(String),
    Io(io::Error),
}

impl SafeTree {
    pub fn new(root: &Path) -> SafeTree {
        SafeTree {
            root: root.to_path_buf(),
            real_dirs: HashSet::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes every ancestor of `rel` a real directory of the tree, creating missing ones
    /// (mode 0755), and returns the full path of `rel`.
    pub fn prepare_parents(&mut self, rel: &Path) -> Result<PathBuf, TreeError> {
        self.walk(rel, true, false)
    }

    /// Makes `rel` itself (and its ancestors) a real directory of the tree; the empty path is
    /// the root.
    pub fn prepare_dir(&mut self, rel: &Path) -> Result<PathBuf, TreeError> {
        self.walk(rel, true, true)
    }

    /// Like [`Self::prepare_parents`] but creates nothing: for paths that must already exist
    /// (hardlink targets).
    pub fn check_parents(&mut self, rel: &Path) -> Result<PathBuf, TreeError> {
        self.walk(rel, false, false)
    }

    fn walk(&mut self, rel: &Path, create: bool, include_last: bool) -> Result<PathBuf, TreeError> {
        if !is_normal_relative(rel) {
            return Err(TreeError::Unsafe(format!(
                "{} is not a plain relative path",
                rel.display()
            )));
        }
        let mut prefix = PathBuf::new();
        let mut components = rel.components().peekable();
        while let Some(component) = components.next() {
            if components.peek().is_none() && !include_last {
                break; // the last component is the entry itself
            }
            prefix.push(component);
            if self.real_dirs.contains(&prefix) {
                continue;
            }
            let full = self.root.join(&prefix);
            match fs::symlink_metadata(&full) {
                Ok(meta) if meta.is_dir() => {}
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(TreeError::Unsafe(format!(
                        "its parent {} is a symlink, which extraction never follows",
                        prefix.display()
                    )));
                }
                Ok(_) => {
                    return Err(TreeError::Unsafe(format!(
                        "{} is not a directory",
                        prefix.display()
                    )));
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound && create => {
                    fs::DirBuilder::new()
                        .mode(0o755)
                        .create(&full)
                        .map_err(TreeError::Io)?;
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    return Err(TreeError::Unsafe(format!(
                        "{} does not exist in this layer",
                        prefix.display()
                    )));
                }
                Err(err) => return Err(TreeError::Io(err)),
            }
            self.real_dirs.insert(prefix.clone());
        }
        Ok(self.root.join(rel))
    }

    /// Records that `rel` is now a real directory.
    pub fn note_dir(&mut self, rel: &Path) {
        self.real_dirs.insert(rel.to_path_buf());
    }

    /// Forgets what is cached at or below `rel` (it was removed or replaced).
    pub fn forget(&mut self, rel: &Path) {
        self.real_dirs.retain(|dir| !dir.starts_with(rel));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    type Case<'a> = (&'a [u8], Result<Option<&'a str>, ()>);

    #[test]
    fn normalizes_entry_names() {
        let cases: Vec<Case> = vec![
            (b"a/b", Ok(Some("a/b"))),
            (b"./a/./b/", Ok(Some("a/b"))),
            (b"/etc/passwd", Ok(Some("etc/passwd"))),
            (b"//a//b", Ok(Some("a/b"))),
            (b"./", Ok(None)),
            (b"/", Ok(None)),
            (b"", Ok(None)),
            (b"..", Err(())),
            (b"../evil", Err(())),
            (b"a/../../evil", Err(())),
            (b"a/../b", Err(())),
            (b"/../etc", Err(())),
            (b"..a/b..", Ok(Some("..a/b.."))),
            (b".wh..wh..opq", Ok(Some(".wh..wh..opq"))),
        ];
        for (name, want) in cases {
            let got = normalize_entry_name(name);
            let got = got
                .map(|p| p.map(|p| p.to_string_lossy().into_owned()))
                .map_err(|_| ());
            assert_eq!(
                got,
                want.map(|o| o.map(String::from)),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
        // Non-UTF-8 names are kept byte for byte.
        let odd = normalize_entry_name(b"x/\xff").unwrap().unwrap();
        assert_eq!(odd.as_os_str().as_bytes(), b"x/\xff");
    }

    #[test]
    fn creates_missing_parents_but_never_walks_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir(&root).unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let mut tree = SafeTree::new(&root);

        let full = tree.prepare_parents(Path::new("a/b/c")).unwrap();
        assert_eq!(full, root.join("a/b/c"));
        assert!(root.join("a/b").is_dir());
        assert!(!full.exists(), "the entry itself is not created");

        symlink(&outside, root.join("link")).unwrap();
        symlink("../outside", root.join("a/rel")).unwrap();
        for rel in ["link/x", "a/rel/x", "link/deeper/x"] {
            assert!(
                matches!(
                    tree.prepare_parents(Path::new(rel)),
                    Err(TreeError::Unsafe(_))
                ),
                "{rel}"
            );
        }
        assert_eq!(
            fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing written outside"
        );

        fs::write(root.join("file"), b"").unwrap();
        assert!(matches!(
            tree.prepare_parents(Path::new("file/x")),
            Err(TreeError::Unsafe(_))
        ));
        assert!(matches!(
            tree.check_parents(Path::new("missing/x")),
            Err(TreeError::Unsafe(_))
        ));
        assert!(
            !root.join("missing").exists(),
            "check_parents creates nothing"
        );
        assert!(matches!(
            tree.prepare_parents(Path::new("/abs")),
            Err(TreeError::Unsafe(_))
        ));
    }

    #[test]
    fn forgetting_a_replaced_directory_rechecks_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut tree = SafeTree::new(root);
        tree.prepare_parents(Path::new("d/x")).unwrap();
        // The directory is replaced by a symlink (as a later tar entry could do).
        fs::remove_dir(root.join("d")).unwrap();
        symlink("/", root.join("d")).unwrap();
        tree.forget(Path::new("d"));
        assert!(matches!(
            tree.prepare_parents(Path::new("d/x")),
            Err(TreeError::Unsafe(_))
        ));
    }
}
