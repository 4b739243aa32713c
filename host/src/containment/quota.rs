//! The workspace's hard disk quota: a tmpfs whose size is the quota,
//! mounted on the workspace directory in the host's own mount namespace
//! when the workspace is made, before the adapter writes into it. A write
//! past the quota fails with `ENOSPC` at once, whoever makes it, and
//! costs the host nothing while the attempt runs: there is nothing to
//! measure. The trainer's supervisor looks at the filesystem's free space
//! (one `statfs`, whatever the workspace holds) to tell the host that the
//! quota was reached, and the attempt fails with the quota named.
//!
//! The contents stay readable by the host after the trainer has ended (the
//! mount is the host's, not the trainer's namespace's) until the workspace
//! is removed, which unmounts it. Its pages are memory, charged to the
//! memory cgroup of whoever wrote them: a trainer's files count against
//! its attempt's memory limit as well as against the quota.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How often the supervisor looks whether the quota was reached.
pub const CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Mounts a tmpfs of `bytes` on the (empty) directory `dir`, owned by
/// root with mode 0700, like a new workspace.
pub fn mount(dir: &Path, bytes: u64) -> io::Result<()> {
    let options = format!("size={bytes},mode=0700");
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(io::Error::from)
}

/// Unmounts what is mounted on `dir`; `false` if nothing was.
pub fn unmount(dir: &Path) -> io::Result<bool> {
    match nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the filesystem of `dir` has no block left: a write there was,
/// or would be, refused.
pub fn full(dir: &Path) -> bool {
    nix::sys::statvfs::statvfs(dir).is_ok_and(|s| s.blocks_available() == 0)
}

/// The mount points under `dir` in this mount namespace, deepest first:
/// the quotas of workspaces a previous run of the host left behind.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = dir.canonicalize() else {
        return vec![];
    };
    let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = mountinfo
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(|field| PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(field))))
        .filter(|p| p.starts_with(&dir) && *p != dir)
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|_| field[i] == b'\\');
        match octal.and_then(|o| u8::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Proves a quota can be mounted under `work_dir` and refuses a write past
/// it at once; unmounts the quotas a previous run left there.
pub fn probe(work_dir: &Path) -> Result<(), String> {
    for leftover in mounts_under(work_dir) {
        match unmount(&leftover) {
            Ok(_) => {
                tracing::warn!(path = %leftover.display(), "unmounted the workspace quota a previous run of this host left behind")
            }
            Err(e) => return Err(format!("cannot unmount {}: {e}", leftover.display())),
        }
    }
    let dir = work_dir.join(".quota-probe");
    let _ = unmount(&dir);
    let _ = std::fs::remove_dir(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let tried = mount(&dir, 64 << 10)
        .map_err(|e| {
            format!(
                "cannot mount a tmpfs on {} (it needs root): {e}",
                dir.display()
            )
        })
        .and_then(|()| {
            let past = std::fs::write(dir.join("fill"), vec![1u8; 128 << 10]);
            match past {
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Ok(()),
                other => Err(format!(
                    "a write past a 64 KiB tmpfs was not refused with ENOSPC ({other:?})"
                )),
            }
        });
    let _ = unmount(&dir);
    let _ = std::fs::remove_dir(&dir);
    tried
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(br"/work/a\040b"), b"/work/a b");
        assert_eq!(unescape(br"/plain"), b"/plain");
        assert_eq!(unescape(br"/end\04"), br"/end\04");
    }
}
