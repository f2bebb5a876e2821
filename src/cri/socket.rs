//! The CRI server's unix socket: created mode 0600 (owned by the calling user, as containerd's),
//! or 0660 owned by the `--socket-group` group, never stolen from a live server, replaced when
//! stale, and removed when the server stops.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixSocket};
use tracing::{info, warn};

/// Mode of the socket file: only its owner may connect (the CRI has no authentication).
pub const SOCKET_MODE: u32 = 0o600;
/// Mode of the socket file with a socket group: its members may connect too.
pub const GROUP_SOCKET_MODE: u32 = 0o660;
/// Mode of socket directories we create for a socket group: its members may reach the socket.
const GROUP_PARENT_DIR_MODE: u32 = 0o710;
/// Mode of the socket's parent directories when we create them.
const PARENT_DIR_MODE: u32 = 0o700;
const LISTEN_BACKLOG: u32 = 1024;

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("a server is already listening on {0}; refusing to replace its socket")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to remove it")]
    NotASocket(PathBuf),
    #[error("no group named {0:?} (give a group name or a numeric gid)")]
    UnknownGroup(String),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SocketError {
    let path = path.to_owned();
    move |source| SocketError::Io {
        action,
        path,
        source,
    }
}

/// Removes the socket file when dropped, unless the path now holds a different file (a newer
/// server replaced it), which is left alone.
#[derive(Debug)]
pub struct SocketFileGuard {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFileGuard {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFileGuard {
    fn drop(&mut self) {
        let still_ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| meta.dev() == self.dev && meta.ino() == self.ino);
        if !still_ours {
            return;
        }
        if let Err(err) = std::fs::remove_file(&self.path) {
            warn!(path = %self.path.display(), %err, "cannot remove the CRI socket");
        }
    }
}

/// `--socket-group`: a numeric gid, or a group name looked up in the group database.
pub fn resolve_group(name_or_gid: &str) -> Result<u32, SocketError> {
    if let Ok(gid) = name_or_gid.parse::<u32>() {
        return Ok(gid);
    }
    match nix::unistd::Group::from_name(name_or_gid) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        _ => Err(SocketError::UnknownGroup(name_or_gid.to_string())),
    }
}

/// Binds and listens on `path`; see the module docs for the rules.
pub async fn bind_unix(path: &Path) -> Result<(UnixListener, SocketFileGuard), SocketError> {
    bind_unix_for(path, None).await
}

/// [`bind_unix`], the socket (and the directory created for it) open to members of `group`.
pub async fn bind_unix_for(
    path: &Path,
    group: Option<u32>,
) -> Result<(UnixListener, SocketFileGuard), SocketError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let created = !parent.exists();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(PARENT_DIR_MODE)
            .create(parent)
            .map_err(io_error("create the socket directory", parent))?;
        // An existing directory is the administrator's: left as it is.
        if let (true, Some(gid)) = (created, group) {
            set_group(parent, gid, GROUP_PARENT_DIR_MODE)?;
        }
    }
    remove_if_stale(path).await?;

    let socket = UnixSocket::new_stream().map_err(io_error("create a socket for", path))?;
    socket.bind(path).map_err(io_error("bind", path))?;
    // Until listen() nobody can connect, so the mode is right before the first client arrives.
    let meta = std::fs::symlink_metadata(path).map_err(io_error("stat", path))?;
    let guard = SocketFileGuard {
        path: path.to_owned(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    match group {
        Some(gid) => set_group(path, gid, GROUP_SOCKET_MODE)?,
        None => std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
            .map_err(io_error("set the mode of", path))?,
    }
    let listener = socket
        .listen(LISTEN_BACKLOG)
        .map_err(io_error("listen on", path))?;
    Ok((listener, guard))
}

fn set_group(path: &Path, gid: u32, mode: u32) -> Result<(), SocketError> {
    std::os::unix::fs::lchown(path, None, Some(gid)).map_err(io_error("set the group of", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io_error("set the mode of", path))
}

/// Removes a socket nobody listens on; refuses to touch a live socket or a non-socket file.
async fn remove_if_stale(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(io_error("stat", path)(err)),
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.to_owned()));
    }
    let probe = UnixSocket::new_stream().map_err(io_error("create a socket for", path))?;
    match probe.connect(path).await {
        // WouldBlock: a full backlog, which only a live listener has.
        Ok(_) => Err(SocketError::InUse(path.to_owned())),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
            Err(SocketError::InUse(path.to_owned()))
        }
        Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
            info!(path = %path.display(), "removing the stale CRI socket of a server that is gone");
            match std::fs::remove_file(path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => {
                    Err(io_error("remove the stale socket", path)(err))
                }
                _ => Ok(()),
            }
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error("probe the existing socket", path)(err)),
    }
}
