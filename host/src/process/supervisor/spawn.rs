//! Starting the trainer: `execve` of the executable in a process group of its
//! own, tied to the supervisor's life by `PR_SET_PDEATHSIG`.

use super::confine::Entry;
use crate::containment::Confinement;
use nix::errno::Errno;
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::io;
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
    let supervisor = nix::unistd::getpid();
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
    // getppid, syscall, and the system calls of `Entry`). The supervisor
    // runs no other thread, so nothing can hold a lock the child needs.
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
            // Before the death signal: changing the user clears it.
            if let Some(entry) = &entry {
                entry.enter()?;
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The supervisor may have died before the prctl took effect, in
            // which case nothing would ever kill this process.
            if libc::getppid() != supervisor.as_raw() {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
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
                Some(entry) => entry.restrict_filesystem(),
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
    Ok(child.id())
}

/// An error's text without Rust's "(os error N)" suffix.
fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(code) => Errno::from_raw(code).desc().to_string(),
        None => error.to_string(),
    }
}
