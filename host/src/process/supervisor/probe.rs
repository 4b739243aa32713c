//! `trainyard-supervise --probe <layer> [args]`: the host's start-up check
//! that a layer which needs a process of its own (a namespace, a filter)
//! can be made here. Each is tried for real in this short-lived process;
//! the exit status says whether it worked, standard error why not.

use crate::containment::view::{self, Access, ViewPlan};
use crate::containment::{network, seccomp};
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

/// The flag, followed by the layer's name and its arguments.
pub const PROBE_FLAG: &str = "--probe";

/// Tries `layer`; exit status 0 if it works.
pub(crate) fn run(mut args: impl Iterator<Item = OsString>) -> ExitCode {
    let layer = args.next().unwrap_or_default();
    let tried = match layer.to_str() {
        Some("network") => {
            network::isolate().map_err(|e| format!("cannot make a network namespace: {e}"))
        }
        Some("pid") => pid_namespace().map_err(|e| format!("cannot make a PID namespace: {e}")),
        Some("mount") => mount_view(args.next().map(PathBuf::from))
            .map_err(|e| format!("cannot build a filesystem view in a mount namespace: {e}")),
        Some("seccomp") => system_call_filter(),
        _ => Err(format!("no probe for the layer {layer:?}")),
    };
    match tried {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("{reason}");
            ExitCode::from(1)
        }
    }
}

/// A PID namespace whose first process starts and is reaped.
fn pid_namespace() -> io::Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID)?;
    // SAFETY: this process runs no other thread; the child only exits.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => unsafe { libc::_exit(0) },
        nix::unistd::ForkResult::Parent { child } => {
            nix::sys::wait::waitpid(child, None)?;
            Ok(())
        }
    }
}

/// A view holding `/usr`, built on `root` and entered.
fn mount_view(root: Option<PathBuf>) -> io::Result<()> {
    let root = root.ok_or_else(|| io::Error::other("no directory to build the view on"))?;
    let plan = ViewPlan {
        root,
        paths: vec![("/usr".into(), Access::ReadOnly)],
        tmp: "/nonexistent".into(),
        workspace: "/".into(),
    };
    view::Prepared::new(&plan)?.enter()
}

/// The filter installed here refuses a user namespace.
fn system_call_filter() -> Result<(), String> {
    seccomp::prepare(&[])?
        .install()
        .map_err(|e| format!("cannot install a system-call filter: {e}"))?;
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        Err(nix::errno::Errno::EPERM) => Ok(()),
        other => Err(format!(
            "the system-call filter did not refuse a user namespace ({other:?})"
        )),
    }
}
