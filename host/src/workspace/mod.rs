//! The per-attempt workspace: an empty directory `base/<task>-<attempt>`
//! that is the trainer's working directory and the only place an adapter's
//! files go. A workspace handed to a trainer is removed when its attempt
//! ends and never serves another, so nothing of an earlier attempt can
//! still write into a later one's; one no trainer ever had is emptied and
//! kept for a later attempt ([`spares`]).
//!
//! Paths come from adapters and checkpoints, and the directory's content from
//! a trainer, so none of it is trusted: every access goes through a
//! [`cap_std::fs::Dir`] handle opened on the workspace, which resolves paths
//! (symlinks included) without ever leaving it. Absolute paths and `..` are
//! refused up front, with a message saying so.

use crate::containment::Credentials;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, FileType, FileTypeExt, OpenOptions, OpenOptionsExt};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use trainyard_proto::AttemptRef;

mod spares;
pub use spares::Spares;

/// One attempt's workspace directory.
#[derive(Debug)]
pub struct Workspace {
    path: PathBuf,
    /// All access to the content goes through this handle, never `path`.
    dir: Dir,
    /// Whether a trainer's user was given it ([`Workspace::hand_over`]).
    handed_over: AtomicBool,
    /// Whether it is a filesystem of its own, the size of its disk quota
    /// (`crate::containment::quota`), unmounted when it is removed.
    quota: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("workspace path {path:?} is refused: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("cannot create the workspace {dir}: {source}")]
    Create { dir: PathBuf, source: io::Error },
    #[error("cannot write {path:?} in the workspace: {source}")]
    Write { path: String, source: io::Error },
    #[error("cannot read {path:?} in the workspace: {source}")]
    Read { path: String, source: io::Error },
    #[error("cannot {action} {path:?} in the workspace: it leads out of the workspace (through a symbolic link)")]
    Escapes { path: String, action: &'static str },
    #[error("cannot {action} {path:?} in the workspace: it is a {kind}, not a regular file")]
    NotRegularFile {
        path: String,
        action: &'static str,
        kind: &'static str,
    },
    #[error(
        "cannot read {path:?} in the workspace: it holds {size} bytes, over the limit of {limit}"
    )]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("cannot remove the workspace {dir}: {source}")]
    Remove { dir: PathBuf, source: io::Error },
}

/// Makes the directory workspaces live in: others may pass through it
/// (mode 0711) to reach a workspace handed to them, but not list it.
pub fn prepare_base(base: &Path) -> io::Result<()> {
    fs::create_dir_all(base)?;
    fs::set_permissions(base, fs::Permissions::from_mode(0o711))
}

impl Workspace {
    /// An empty directory `base/<task>-<attempt>` (mode 0700), replacing
    /// any leftover of the same name: `spare` moved there when one is given
    /// ([`Spares::take`]), else a new one. `base` is created if missing.
    pub fn create(
        base: &Path,
        attempt: AttemptRef,
        spare: Option<PathBuf>,
    ) -> Result<Workspace, WorkspaceError> {
        Self::create_with_quota(base, attempt, spare, None)
    }

    /// Like [`Workspace::create`], and with a `quota` the directory is a
    /// tmpfs of that many bytes: nothing written into it, by the adapter
    /// or the trainer, can take more.
    pub fn create_with_quota(
        base: &Path,
        attempt: AttemptRef,
        spare: Option<PathBuf>,
        quota: Option<u64>,
    ) -> Result<Workspace, WorkspaceError> {
        let path = base.join(format!("{}-{}", attempt.task, attempt.attempt));
        let mut workspace = Self::create_at(base, path, spare)?;
        if let Some(bytes) = quota {
            let path = workspace.path.clone();
            let mounted = crate::containment::quota::mount(&path, bytes)
                .and_then(|()| Self::open(path.clone()));
            match mounted {
                Ok(mut mounted) => {
                    mounted.quota = true;
                    workspace = mounted;
                }
                Err(source) => {
                    let _ = workspace.remove();
                    return Err(WorkspaceError::Create { dir: path, source });
                }
            }
        }
        Ok(workspace)
    }

    fn create_at(
        base: &Path,
        path: PathBuf,
        spare: Option<PathBuf>,
    ) -> Result<Workspace, WorkspaceError> {
        let create_error = |source| WorkspaceError::Create {
            dir: path.clone(),
            source,
        };
        // A spare was made here with mode 0700, and only the host and an
        // adapter's instance (which cannot change modes) wrote in it since:
        // moved into place, it replaces an empty leftover of the same name,
        // and needs neither the checks nor the mode set below. A leftover
        // with something in it, or not a directory, refuses the move.
        let spare = match spare.map(|spare| (fs::rename(&spare, &path), spare)) {
            Some((Ok(()), _)) => return Self::open(path.clone()).map_err(create_error),
            Some((Err(_), spare)) => Some(spare),
            None => None,
        };
        fs::create_dir_all(base).map_err(create_error)?;
        match fs::symlink_metadata(&path) {
            Ok(leftover) if leftover.is_dir() => {
                crate::containment::quota::unmount(&path).map_err(create_error)?;
                remove_tree(&path).map_err(create_error)?
            }
            Ok(_) => fs::remove_file(&path).map_err(create_error)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(create_error(e)),
        }
        if !spare.is_some_and(|spare| moved(&spare, &path)) {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .map_err(create_error)?;
        }
        // The umask can only take bits away; set the mode exactly.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).map_err(create_error)?;
        Self::open(path.clone()).map_err(create_error)
    }

    /// The workspace at `path`, a directory in place.
    fn open(path: PathBuf) -> io::Result<Workspace> {
        let dir = Dir::open_ambient_dir(&path, ambient_authority())?;
        Ok(Workspace {
            path,
            dir,
            handed_over: AtomicBool::new(false),
            quota: false,
        })
    }

    /// Whether a trainer's user was ever given this workspace.
    pub fn handed_over(&self) -> bool {
        self.handed_over.load(Ordering::Relaxed)
    }

    /// Hands the workspace to the trainer's user: it and everything the
    /// adapter wrote into it become that user's (symbolic links themselves,
    /// never what they point to), and a `tmp` directory is made for the
    /// trainer's temporary files.
    pub fn hand_over(&self, owner: Option<Credentials>) -> Result<PathBuf, WorkspaceError> {
        // From the first step on: a failure half-way still counts.
        self.handed_over.store(true, Ordering::Relaxed);
        let tmp = self.path.join("tmp");
        let create_error = |source| WorkspaceError::Create {
            dir: tmp.clone(),
            source,
        };
        match self.dir.create_dir("tmp") {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(create_error(e)),
        }
        if let Some(owner) = owner {
            for entry in walkdir::WalkDir::new(&self.path).follow_links(false) {
                let entry = entry.map_err(|e| create_error(e.into()))?;
                std::os::unix::fs::lchown(entry.path(), Some(owner.uid), Some(owner.gid))
                    .map_err(create_error)?;
            }
        }
        Ok(tmp)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a file given by a relative path, creating parent directories.
    /// Never follows a symlink out of the workspace, never writes outside it.
    pub fn write_file(&self, relative: &str, contents: &[u8]) -> Result<(), WorkspaceError> {
        let mut file = self.create_file(relative)?;
        file.write_all(contents)
            .map_err(|source| WorkspaceError::Write {
                path: relative.to_string(),
                source,
            })
    }

    /// Creates (or truncates) a regular file given by a relative path,
    /// creating parent directories, for the caller to write. Never follows
    /// a symlink out of the workspace, never opens anything outside it.
    pub fn create_file(&self, relative: &str) -> Result<fs::File, WorkspaceError> {
        let path = checked_relative(relative)?;
        let write_error = |source: io::Error| {
            if leads_out(&source) {
                WorkspaceError::Escapes {
                    path: relative.to_string(),
                    action: "write",
                }
            } else {
                WorkspaceError::Write {
                    path: relative.to_string(),
                    source,
                }
            }
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.dir.create_dir_all(parent).map_err(write_error)?;
        }
        match self.dir.metadata(path) {
            Ok(existing) if !existing.is_file() => {
                return Err(WorkspaceError::NotRegularFile {
                    path: relative.to_string(),
                    action: "write",
                    kind: file_kind(existing.file_type()),
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(write_error(e)),
        }
        let mut options = OpenOptions::new();
        // Non-blocking, so a FIFO swapped in since the check fails the open
        // instead of waiting for a reader forever.
        options
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let file = self.dir.open_with(path, &options).map_err(write_error)?;
        Ok(file.into_std())
    }

    /// Removes a file given by a relative path (a half-written one).
    pub fn remove_file(&self, relative: &str) -> Result<(), WorkspaceError> {
        let path = checked_relative(relative)?;
        self.dir
            .remove_file(path)
            .map_err(|source| WorkspaceError::Write {
                path: relative.to_string(),
                source,
            })
    }

    /// Reads a regular file given by a relative path, refusing symlinks that
    /// lead outside the workspace, anything that is not a regular file, and
    /// files over `limit` bytes (without reading them whole).
    pub fn read_file(&self, relative: &str, limit: u64) -> Result<Vec<u8>, WorkspaceError> {
        let (file, size) = self.open_regular(relative)?;
        let too_large = |size| WorkspaceError::TooLarge {
            path: relative.to_string(),
            size,
            limit,
        };
        if size > limit {
            return Err(too_large(size));
        }
        // The file may still grow while it is read: read one byte past the
        // limit at most, to notice.
        let mut contents = Vec::with_capacity(size as usize);
        file.take(limit.saturating_add(1))
            .read_to_end(&mut contents)
            .map_err(|source| WorkspaceError::Read {
                path: relative.to_string(),
                source,
            })?;
        if contents.len() as u64 > limit {
            return Err(too_large(contents.len() as u64));
        }
        Ok(contents)
    }

    /// Opens a regular file given by a relative path for reading, with its
    /// size, refusing symlinks that lead outside the workspace and anything
    /// that is not a regular file. The handle reads the file it opened,
    /// whatever is renamed over its path since.
    pub fn open_regular(&self, relative: &str) -> Result<(fs::File, u64), WorkspaceError> {
        let path = checked_relative(relative)?;
        let read_error = |source: io::Error| {
            if leads_out(&source) {
                WorkspaceError::Escapes {
                    path: relative.to_string(),
                    action: "read",
                }
            } else {
                WorkspaceError::Read {
                    path: relative.to_string(),
                    source,
                }
            }
        };
        let mut options = OpenOptions::new();
        // Opening a FIFO for reading blocks until a writer appears, unless
        // non-blocking; the file type is checked on the open handle, so
        // nothing can be swapped in between the check and the read.
        options
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let file = self.dir.open_with(path, &options).map_err(read_error)?;
        let metadata = file.metadata().map_err(read_error)?;
        if !metadata.is_file() {
            return Err(WorkspaceError::NotRegularFile {
                path: relative.to_string(),
                action: "read",
                kind: file_kind(metadata.file_type()),
            });
        }
        Ok((file.into_std(), metadata.len()))
    }

    /// The regular files under the directory `relative` (recursively), as
    /// paths relative to the workspace, sorted. Symbolic links are left
    /// out, never followed; so is a directory that is a link. No directory
    /// at all: none.
    pub fn files_under(&self, relative: &str) -> Result<Vec<String>, WorkspaceError> {
        let path = checked_relative(relative)?;
        let read_error = |source: io::Error| WorkspaceError::Read {
            path: relative.to_string(),
            source,
        };
        match self.dir.symlink_metadata(path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(vec![]),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(read_error(e)),
        }
        let mut found = vec![];
        let mut pending = vec![relative.trim_end_matches('/').to_string()];
        while let Some(dir) = pending.pop() {
            let entries = self.dir.read_dir(&dir).map_err(read_error)?;
            for entry in entries {
                let entry = entry.map_err(read_error)?;
                let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let kind = entry.file_type().map_err(read_error)?;
                let child = format!("{dir}/{name}");
                if kind.is_dir() {
                    pending.push(child);
                } else if kind.is_file() {
                    found.push(child);
                }
            }
        }
        found.sort();
        Ok(found)
    }

    /// Deletes the workspace and everything in it, without following
    /// symlinks out of it. Called once the trainer's group is gone.
    pub fn remove(self) -> Result<(), WorkspaceError> {
        let Workspace {
            path, dir, quota, ..
        } = self;
        drop(dir);
        let remove_error = |source| WorkspaceError::Remove {
            dir: path.clone(),
            source,
        };
        if quota {
            crate::containment::quota::unmount(&path).map_err(remove_error)?;
        }
        remove_tree(&path).map_err(remove_error)
    }

    /// Deletes everything in the workspace, without following symlinks out
    /// of it, keeping the directory (with a quota: unmounts its filesystem,
    /// leaving the empty directory under it). Only for a workspace no
    /// trainer ever had: nothing else can write into it.
    fn empty(&mut self) -> io::Result<()> {
        if self.quota {
            crate::containment::quota::unmount(&self.path)?;
            self.quota = false;
            return Ok(());
        }
        empty_dir(&self.path)
    }

    /// The directory's path, the workspace given up (its handle closed).
    fn into_path(self) -> PathBuf {
        self.path
    }
}

/// Moves an emptied spare directory to `path`; a spare that cannot be moved
/// is removed instead.
fn moved(spare: &Path, path: &Path) -> bool {
    if fs::rename(spare, path).is_ok() {
        return true;
    }
    let _ = remove_tree(spare);
    false
}

/// Removes every entry of a directory, keeping the directory.
fn empty_dir(path: &Path) -> io::Result<()> {
    for entry in fs::read_dir(path)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Checks an adapter- or checkpoint-supplied path before it is used.
fn checked_relative(relative: &str) -> Result<&Path, WorkspaceError> {
    let refuse = |reason| WorkspaceError::InvalidPath {
        path: relative.to_string(),
        reason,
    };
    if relative.is_empty() {
        return Err(refuse("the path is empty"));
    }
    if relative.contains('\0') {
        return Err(refuse("the path contains a NUL byte"));
    }
    let path = Path::new(relative);
    if path.is_absolute() {
        return Err(refuse(
            "absolute paths are not allowed; give a path relative to the workspace",
        ));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refuse("'..' is not allowed"));
    }
    if !path.components().any(|c| matches!(c, Component::Normal(_))) {
        return Err(refuse("the path names no file"));
    }
    Ok(path)
}

/// Whether cap-std refused a path because resolving it would leave the
/// workspace. It reports that as a permission error of its own making, which
/// unlike a real EACCES carries no OS error code.
fn leads_out(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::PermissionDenied && error.raw_os_error().is_none()
}

fn file_kind(file_type: FileType) -> &'static str {
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "FIFO"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Removes a directory tree; std's `remove_dir_all` deletes symlinks, never
/// what they point to. A trainer may have left directories without write
/// permission, which would stop the removal: those are opened up and the
/// removal tried again.
fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            grant_owner_access(path)?;
            fs::remove_dir_all(path)
        }
        other => other,
    }
}

/// Gives the owner full access to every directory of a tree. Only paths that
/// `lstat` shows to be directories are changed, so no symlink is followed;
/// it runs after the trainer's group is gone, so nothing swaps a directory
/// for a symlink meanwhile.
fn grant_owner_access(dir: &Path) -> io::Result<()> {
    let metadata = fs::symlink_metadata(dir)?;
    if !metadata.is_dir() {
        return Ok(());
    }
    let mode = metadata.permissions().mode() | 0o700;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))?;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            grant_owner_access(&entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_checked_before_use() {
        assert!(checked_relative("config/run.json").is_ok());
        assert!(checked_relative("./model.pt").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", ".", "a\0b"] {
            assert!(
                matches!(
                    checked_relative(bad),
                    Err(WorkspaceError::InvalidPath { .. })
                ),
                "{bad:?} was accepted"
            );
        }
    }
}
