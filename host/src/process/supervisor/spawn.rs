//! Starting the trainer: `execve` of the executable in a process group of its
//! own, tied to the supervisor's life by `PR_SET_PDEATHSIG`.

use super::confine::Entry;
use crate::containment::Confinement;
use nix::errno::Errno;
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The terminal's signals, which the supervisor ignores and the trainer gets
/// back at their default disposition.
pub(crate) const TERMINAL_SIGNALS: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGHUP,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
];

/// The flag that carries the trainer's confinement, as JSON.
pub const CONFINE_FLAG: &str = "--confine";

/// What the host asked the supervisor to run: its command line and how to
/// confine it.
#[derive(Debug)]
pub(crate) struct Invocation {
    pub confinement: Option<Confinement>,
    pub executable: PathBuf,
    pub argv0: OsString,
    pub args: Vec<OsString>,
}

/// The command line is not `[--confine <json>] <executable> <argv0> [args...]`.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("usage: trainyard-supervise [--confine <json>] <executable> <argv0> [args...] (started by the trainyard host with its control socket as standard input)")]
    Usage,
    #[error("the confinement given to trainyard-supervise is not valid: {0}")]
    Confinement(String),
}

impl Invocation {
    pub(crate) fn parse(args: impl Iterator<Item = OsString>) -> Result<Self, UsageError> {
        let mut args = args.peekable();
        let confinement = if args.peek().is_some_and(|a| a == CONFINE_FLAG) {
            args.next();
            let json = args.next().ok_or(UsageError::Usage)?;
            let json = json.to_str().ok_or(UsageError::Usage)?;
            Some(serde_json::from_str(json).map_err(|e| UsageError::Confinement(e.to_string()))?)
        } else {
            None
        };
        let executable = PathBuf::from(args.next().ok_or(UsageError::Usage)?);
        let argv0 = args.next().ok_or(UsageError::Usage)?;
        Ok(Self {
            confinement,
            executable,
            argv0,
            args: args.collect(),
        })
    }
}

/// Starts the trainer and returns its pid, which is also its process group
/// id; or, if it could not be started, the reason for the host's operator.
///
/// The trainer gets the supervisor's environment, working directory, stdin,
/// stdout and stderr unchanged (the host prepared them), the default
/// disposition of every signal and an empty signal mask, and no other file
/// descriptor.
pub(crate) fn start_trainer(invocation: &Invocation, entry: Option<Entry>) -> Result<u32, String> {
    // A bare name would make exec search PATH; the host resolved the
    // executable already, so a name without a slash means the working
    // directory.
    let program = if invocation.executable.components().count() == 1
        && !invocation.executable.is_absolute()
    {
        Path::new(".").join(&invocation.executable)
    } else {
        invocation.executable.clone()
    };
    // Readable once the supervisor has ended: how the trainer (whose parent
    // may be its namespace's first process, and which may be that process
    // itself, whose parent's pid it cannot see) knows the supervisor is gone.
    let supervisor = pidfd_of_self().map_err(|e| format!("cannot watch the supervisor: {e}"))?;
    let supervisor_fd = supervisor.as_raw_fd();
    let mut command = Command::new(&program);
    command
        .arg0(&invocation.argv0)
        .args(&invocation.args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0);
    let mut entry = entry;
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (signal, sigemptyset, sigprocmask, prctl,
    // poll, syscall, and the system calls of `Entry`). The supervisor runs
    // no other thread, so nothing can hold a lock the child needs.
    unsafe {
        command.pre_exec(move || {
            // Ignored dispositions and the signal mask survive exec: the
            // supervisor ignores the terminal's signals (and Rust's runtime
            // SIGPIPE) and blocks SIGTERM, none of which the trainer wants.
            for signal in TERMINAL_SIGNALS {
                libc::signal(signal as libc::c_int, libc::SIG_DFL);
            }
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            let mut unblocked = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(unblocked.as_mut_ptr());
            if libc::sigprocmask(libc::SIG_SETMASK, unblocked.as_ptr(), std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            tie_to_parent(supervisor_fd)?;
            if let Some(entry) = &entry {
                entry.enter()?;
            }
            // Again: changing the user cleared it, and with a PID namespace
            // the parent is now the namespace's first process.
            tie_to_parent(supervisor_fd)?;
            // Only stdio crosses into the trainer. Marking the rest
            // close-on-exec (rather than closing it) keeps std's own exec
            // error pipe working; kernels before 5.11 lack the call, and
            // there every descriptor of this process is close-on-exec anyway.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            match entry.as_mut() {
                Some(entry) => entry.restrict(),
                None => Ok(()),
            }
        });
    }
    let child = command.spawn().map_err(|e| {
        format!(
            "cannot execute {}: {}",
            invocation.executable.display(),
            describe(&e)
        )
    })?;
    drop(supervisor);
    Ok(child.id())
}

/// Dies with its parent; fails if the supervisor is gone already (it may
/// have died before the death signal was set, and then nothing would ever
/// kill this process). System calls only.
pub(crate) fn tie_to_parent(supervisor: RawFd) -> io::Result<()> {
    // SAFETY: prctl and poll on integers and a local array.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut watched = libc::pollfd {
            fd: supervisor,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut watched, 1, 0) != 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// A pidfd of this process (close-on-exec).
pub(crate) fn pidfd_of_self() -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// An error's text without Rust's "(os error N)" suffix.
pub(crate) fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => Errno::from_raw(code).desc().to_string(),
        None => error.to_string(),
    }
}
