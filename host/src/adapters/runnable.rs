//! Whether the trainer's user can run a program an adapter may launch,
//! checked when the adapter is loaded (at start-up, on reload, and by
//! `trainyard adapter run`), so a host never advertises an adapter whose
//! every trainer would fail to start.
//!
//! The walk follows what `execve` does as that user: every directory on the
//! way to the program (and to the file its symbolic links lead to) must let
//! the user through, the file must be a regular file the user may execute,
//! and a script starting with `#!` must be readable by the user, its
//! interpreter checked the same way (through `PATH` for `#!/usr/bin/env
//! NAME`). The usual failure is a Python installed under root's home
//! directory (a pyenv or conda shim on `PATH`), which a trainer running as
//! an unprivileged user cannot reach.
//!
//! The permission rules ([`permits`]) and the `#!` line ([`shebang`]) are
//! pure functions; [`check`] reads the filesystem.

use nix::unistd::{Gid, Uid, User};
use std::ffi::{CString, OsStr};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Interpreters of interpreters followed at most (the kernel allows four).
const MAX_INTERPRETERS: usize = 4;

/// The user trainers run as, with its groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runner {
    pub name: String,
    pub uid: u32,
    /// Its primary group first, then the others it belongs to.
    pub groups: Vec<u32>,
}

impl Runner {
    /// The user with this uid and primary gid, as the system names it.
    pub fn of(uid: u32, gid: u32) -> Runner {
        let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
        let name = user
            .as_ref()
            .map_or_else(|| format!("uid {uid}"), |u| u.name.clone());
        let mut groups = vec![gid];
        if let Some(extra) = user.as_ref().and_then(|u| {
            let name = CString::new(u.name.clone()).ok()?;
            nix::unistd::getgrouplist(&name, Gid::from_raw(gid)).ok()
        }) {
            groups.extend(extra.into_iter().map(Gid::as_raw).filter(|g| *g != gid));
        }
        Runner { name, uid, groups }
    }

    /// The host's own user, who runs trainers when no other is set.
    pub fn host_user() -> Runner {
        Runner::of(
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }
}

/// A program the trainer's user cannot run, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("program {program:?} resolves to {}, which user {user:?} cannot execute: {why}; {fix}", resolved.display())]
pub struct NotRunnable {
    pub program: String,
    pub resolved: PathBuf,
    pub user: String,
    pub why: String,
    pub fix: String,
}

/// Read permission, in a mode's bits for "other".
pub const READ: u32 = 0o4;
/// Execute (search, for a directory) permission.
pub const EXECUTE: u32 = 0o1;

/// Whether `who` has `want` ([`READ`], [`EXECUTE`] or both) on a file of
/// this `mode`, owner and group. Root reads and searches anything and
/// executes a file that anyone may execute.
pub fn permits(mode: u32, owner: u32, group: u32, is_dir: bool, who: &Runner, want: u32) -> bool {
    if who.uid == 0 {
        let needs_x = want & EXECUTE != 0 && !is_dir;
        return !needs_x || mode & 0o111 != 0;
    }
    let bits = if owner == who.uid {
        (mode >> 6) & 0o7
    } else if who.groups.contains(&group) {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    bits & want == want
}

/// The interpreter and its one optional argument of a file whose first
/// bytes are `head`, if it starts with `#!`.
pub fn shebang(head: &[u8]) -> Option<(PathBuf, Option<String>)> {
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim().splitn(2, [' ', '\t']);
    let interpreter = parts.next().filter(|p| !p.is_empty())?;
    let arg = parts
        .next()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty());
    Some((PathBuf::from(interpreter), arg))
}

/// Checks that `runner` can run `program` (as the adapter entry spells it),
/// which the host resolved to `executable`; `search_path` is the `PATH` an
/// `env` interpreter looks names up on.
pub fn check(
    program: &str,
    executable: &Path,
    runner: &Runner,
    search_path: Option<&OsStr>,
) -> Result<(), NotRunnable> {
    let mut next = executable.to_path_buf();
    for _ in 0..=MAX_INTERPRETERS {
        match check_file(&next, runner, search_path) {
            Ok(None) => return Ok(()),
            Ok(Some(interpreter)) => next = interpreter,
            Err((resolved, why, fix)) => {
                return Err(NotRunnable {
                    program: program.to_string(),
                    resolved,
                    user: runner.name.clone(),
                    why,
                    fix,
                })
            }
        }
    }
    Err(NotRunnable {
        program: program.to_string(),
        resolved: next,
        user: runner.name.clone(),
        why: format!("more than {MAX_INTERPRETERS} interpreters in a row"),
        fix: "name the final interpreter in the adapter entry's programs".into(),
    })
}

/// Why a file fails, with the path at fault and the fix.
type Refusal = (PathBuf, String, String);

/// Checks one file of the chain; returns the interpreter it needs next, if
/// it is a script.
fn check_file(
    path: &Path,
    runner: &Runner,
    search_path: Option<&OsStr>,
) -> Result<Option<PathBuf>, Refusal> {
    let resolved = path.canonicalize().map_err(|e| {
        (
            path.to_path_buf(),
            format!("it cannot be resolved ({e})"),
            "install it, or name another program in the adapter entry's programs".into(),
        )
    })?;
    let dirs: Vec<PathBuf> = [path.parent(), resolved.parent()]
        .into_iter()
        .flatten()
        .map(Path::to_path_buf)
        .collect();
    for dir in dirs {
        if let Some(blocked) = unpassable(&dir, runner) {
            let why = format!("{} does not let it through", blocked.display());
            let fix = format!(
                "install the program where {:?} can reach it (a root-only home directory holds \
                 pyenv and conda installs), or give {} o+x",
                runner.name,
                blocked.display()
            );
            return Err((resolved, why, fix));
        }
    }
    let meta = std::fs::metadata(&resolved).map_err(|e| {
        (
            resolved.clone(),
            format!("cannot read it ({e})"),
            String::new(),
        )
    })?;
    let may = |want| permits(meta.mode(), meta.uid(), meta.gid(), false, runner, want);
    if !meta.is_file() || !may(EXECUTE) {
        let fix = format!("make it executable for {:?} (chmod o+x)", runner.name);
        return Err((resolved, "it is not a file it may execute".into(), fix));
    }
    let mut head = [0u8; 256];
    let read = std::fs::File::open(&resolved)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let Some((interpreter, arg)) = shebang(&head[..read]) else {
        return Ok(None);
    };
    if !may(READ) {
        let fix = format!("make it readable for {:?} (chmod o+r)", runner.name);
        return Err((resolved, "it is a script it may not read".into(), fix));
    }
    let env = interpreter.file_name().is_some_and(|n| n == "env");
    match arg.filter(|a| env && !a.starts_with('-')) {
        Some(name) => on_path(&name, search_path).map(Some).ok_or_else(|| {
            let why = format!(
                "its interpreter {name:?} (through {}) is not on PATH",
                interpreter.display()
            );
            (resolved, why, "install it, or set PATH".into())
        }),
        None => Ok(Some(interpreter)),
    }
}

/// The first directory on the way to `dir` (included) that `who` may not
/// pass.
pub fn unpassable(dir: &Path, who: &Runner) -> Option<PathBuf> {
    let dir = dir.canonicalize().ok()?;
    dir.ancestors().find_map(|a| {
        let m = std::fs::metadata(a).ok()?;
        (!permits(m.mode(), m.uid(), m.gid(), true, who, EXECUTE)).then(|| a.to_path_buf())
    })
}

/// `name` looked up on `search_path`, as `env` does.
fn on_path(name: &str, search_path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(search_path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn user(uid: u32, groups: &[u32]) -> Runner {
        Runner {
            name: format!("u{uid}"),
            uid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn permissions_follow_owner_then_group_then_others_and_root_needs_one_x_bit() {
        let nobody = user(65534, &[65534]);
        assert!(!permits(0o700, 0, 0, true, &nobody, EXECUTE), "root's home");
        assert!(permits(0o755, 0, 0, false, &nobody, READ | EXECUTE));
        assert!(!permits(0o750, 0, 10, false, &nobody, EXECUTE));
        assert!(permits(0o750, 0, 10, false, &user(5, &[1, 10]), EXECUTE));
        assert!(
            !permits(0o077, 5, 5, false, &user(5, &[5]), EXECUTE),
            "owner bits rule"
        );
        let root = user(0, &[0]);
        assert!(permits(0o700, 7, 7, true, &root, EXECUTE));
        assert!(permits(0o600, 7, 7, false, &root, READ));
        assert!(!permits(0o644, 7, 7, false, &root, EXECUTE));
        assert!(permits(0o100, 7, 7, false, &root, EXECUTE));
    }

    #[test]
    fn a_shebang_names_its_interpreter_and_one_argument() {
        assert_eq!(
            shebang(b"#!/usr/bin/env bash\nset -e\n"),
            Some((PathBuf::from("/usr/bin/env"), Some("bash".into())))
        );
        assert_eq!(
            shebang(b"#! /bin/sh\n"),
            Some((PathBuf::from("/bin/sh"), None))
        );
        assert_eq!(shebang(b"\x7fELF..."), None);
        assert_eq!(shebang(b"#!\n"), None);
    }

    /// Runs a check as a user with no access but the "other" bits.
    fn stranger() -> Runner {
        user(54321, &[54321])
    }

    #[test]
    fn a_program_in_a_closed_directory_is_refused_naming_the_directory_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let closed = dir.path().join("home");
        std::fs::create_dir(&closed).unwrap();
        let program = closed.join("python3");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = check("python3", &program, &stranger(), None).unwrap_err();
        assert_eq!(err.resolved, program);
        assert!(err.why.contains(&closed.display().to_string()), "{err}");
        assert!(err.to_string().contains("\"u54321\""), "{err}");
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        check("python3", &program, &stranger(), None).unwrap();
    }

    #[test]
    fn a_script_needs_read_and_its_interpreter_is_checked_through_env_and_links() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let interp = bin.join("interp");
        std::fs::write(&interp, "").unwrap();
        std::fs::set_permissions(&interp, std::fs::Permissions::from_mode(0o700)).unwrap();
        let script = dir.path().join("train");
        std::fs::write(&script, "#!/usr/bin/env interp\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&script, &link).unwrap();
        let path = Some(bin.as_os_str());
        let err = check("train", &link, &stranger(), path).unwrap_err();
        assert_eq!(err.resolved, interp, "the interpreter is at fault: {err}");
        std::fs::set_permissions(&interp, std::fs::Permissions::from_mode(0o711)).unwrap();
        check("train", &link, &stranger(), path).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o711)).unwrap();
        let err = check("train", &link, &stranger(), path).unwrap_err();
        assert!(err.why.contains("may not read"), "{err}");
    }
}
