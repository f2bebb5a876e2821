//! hostPath volumes: the kubelet's type checks (`Directory`, `DirectoryOrCreate`, `File`,
//! `FileOrCreate`, `Socket`, `CharDevice`, `BlockDevice`; empty means no check).

use super::VolumeError;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

fn type_name(meta: &fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a file"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a fifo"
    } else {
        "something else"
    }
}

/// Checks (and for the `...OrCreate` types, creates) the host path of a hostPath volume.
pub fn prepare_host_path(volume: &str, path: &Path, type_: &str) -> Result<(), VolumeError> {
    let mismatch = |expected: &'static str, found: &'static str| VolumeError::HostPathType {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        expected,
        found,
    };
    let io = |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Follows symlinks, as the kubelet's checker does.
    let meta = match fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    let found = meta.as_ref().map_or("nothing", type_name);
    let (expected, ok): (&'static str, fn(&fs::FileType) -> bool) = match type_ {
        "" => return Ok(()),
        "DirectoryOrCreate" if meta.is_none() => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path)
                .map_err(io)?;
            return Ok(());
        }
        "FileOrCreate" if meta.is_none() => {
            // Like the kubelet: the parent directory must exist.
            match fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
            {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(mismatch(
                        "a file whose parent directory exists",
                        "no parent directory",
                    ));
                }
                Err(e) => return Err(io(e)),
            }
        }
        "Directory" | "DirectoryOrCreate" => ("a directory", |t| t.is_dir()),
        "File" | "FileOrCreate" => ("a file", |t| t.is_file()),
        "Socket" => ("a socket", |t| t.is_socket()),
        "CharDevice" => ("a character device", |t| t.is_char_device()),
        "BlockDevice" => ("a block device", |t| t.is_block_device()),
        _ => {
            return Err(VolumeError::Invalid {
                volume: volume.to_string(),
                reason: format!("unknown hostPath type {type_:?}"),
            });
        }
    };
    match meta {
        Some(meta) if ok(&meta.file_type()) => Ok(()),
        _ => Err(mismatch(expected, found)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn type_checks() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("file"), "x").unwrap();
        fs::create_dir(d.join("dir")).unwrap();
        let _listener = UnixListener::bind(d.join("sock")).unwrap();
        std::os::unix::fs::symlink(d.join("dir"), d.join("link-to-dir")).unwrap();
        let cases: &[(&str, &str, bool)] = &[
            ("file", "", true),
            ("missing", "", true),
            ("dir", "Directory", true),
            ("link-to-dir", "Directory", true),
            ("file", "Directory", false),
            ("missing", "Directory", false),
            ("file", "File", true),
            ("dir", "File", false),
            ("sock", "Socket", true),
            ("file", "Socket", false),
            ("file", "CharDevice", false),
            ("dir", "BlockDevice", false),
            ("file", "DirectoryOrCreate", false),
            ("dir", "FileOrCreate", false),
            ("dir", "Bogus", false),
        ];
        for (name, type_, ok) in cases {
            let result = prepare_host_path("v", &d.join(name), type_);
            assert_eq!(result.is_ok(), *ok, "{name} as {type_:?}: {result:?}");
        }
        let err = prepare_host_path("v", &d.join("file"), "Directory").unwrap_err();
        assert!(err.to_string().contains("is a file"), "{err}");
        if Path::new("/dev/null").exists() {
            assert!(prepare_host_path("v", Path::new("/dev/null"), "CharDevice").is_ok());
        }
    }

    #[test]
    fn creates_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        prepare_host_path("v", &d.join("a/b/c"), "DirectoryOrCreate").unwrap();
        assert!(d.join("a/b/c").is_dir());
        prepare_host_path("v", &d.join("a/f"), "FileOrCreate").unwrap();
        assert!(d.join("a/f").is_file());
        // The parent of a FileOrCreate path is not created.
        assert!(prepare_host_path("v", &d.join("nope/f"), "FileOrCreate").is_err());
        assert!(!d.join("nope").exists());
    }
}
