//! The waiting trainer: the process a prepared sandbox keeps for its one
//! attempt. Forked by the supervisor before any attempt is known, it joins
//! the sandbox's cgroup, network namespace and filesystem view (with a PID
//! namespace, leaving its namespace's `init` behind, [`super::init`]),
//! builds its Landlock ruleset, says it is ready, and waits on its channel.
//! When the attempt comes ([`Admission`]) it places the attempt's workspace
//! and GPU files in its view, sets its limits, becomes the trainer's user,
//! restricts itself (Landlock, the system-call filter) and executes the
//! program — so the attempt pays for these steps only.
//!
//! The channel is a socket pair with the supervisor, close-on-exec on this
//! side: the supervisor reads `ready`, then either a failure (a reason,
//! after which this process exits) or end-of-file, which means the
//! program was executed. The supervisor runs no other thread, so this
//! process may allocate freely.

use super::confine::set_limit;
use super::init;
use super::spawn::{describe, tie_to_parent, TERMINAL_SIGNALS};
use crate::containment::view::{self, Access, AttemptMount, SandboxViewPrepared};
use crate::containment::{filesystem, network, seccomp, Credentials, FsRules};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{self, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// What the waiting trainer is told to say it is ready.
pub(crate) const READY: u8 = b'r';
/// What precedes the reason it could not go on.
pub(crate) const FAILED: u8 = b'e';
/// The most host paths one attempt may add to its view (its workspace and
/// its GPUs' files).
pub(crate) const MAX_MOUNTS: usize = 64;

/// What the supervisor hands the waiting trainer when its attempt comes;
/// the detached copies of `mounts` travel with it, in that order.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Admit {
    /// Where each copy goes, how, and whether it is a directory (with a
    /// view; without, the trainer sees the host's paths themselves).
    pub mounts: Vec<(PathBuf, Access, bool)>,
    /// The attempt's own paths Landlock lets it write: its workspace and
    /// its GPUs' files.
    pub read_write: Vec<PathBuf>,
    pub workspace: PathBuf,
    pub open_files: Option<u64>,
    pub disk: Option<u64>,
    pub executable: PathBuf,
    pub argv0: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Everything the waiting trainer needs, made by the supervisor before
/// the fork.
pub(crate) struct Waiting {
    pub join_fds: Vec<RawFd>,
    pub isolate_network: bool,
    pub view: Option<SandboxViewPrepared>,
    /// A PID namespace without a view still gets a `/proc` of its own.
    pub own_proc: bool,
    /// With a PID namespace: the status pipe's write end.
    pub init_status: Option<RawFd>,
    pub user: Option<Credentials>,
    pub landlock: Option<FsRules>,
    pub seccomp: Option<seccomp::Prepared>,
    pub channel: UnixStream,
    /// A pidfd of the supervisor, readable once it has ended.
    pub supervisor: RawFd,
}

impl Waiting {
    /// Runs in the forked child; never returns.
    pub(crate) fn run(self) -> ! {
        let mut channel = match self.channel.try_clone() {
            Ok(channel) => channel,
            // SAFETY: ends this process at once, as nothing else can be done.
            Err(_) => unsafe { libc::_exit(127) },
        };
        let reason = match self.prepare_and_wait() {
            Ok(never) => match never {},
            Err(reason) => reason,
        };
        let mut said = vec![FAILED];
        said.extend_from_slice(reason.as_bytes());
        let _ = channel.write_all(&said);
        // SAFETY: ends this process without running the supervisor's
        // destructors or flushing its buffers.
        unsafe { libc::_exit(127) }
    }

    fn prepare_and_wait(mut self) -> Result<std::convert::Infallible, String> {
        let sandbox = cannot;
        // SAFETY: setpgid on this process.
        if unsafe { libc::setpgid(0, 0) } != 0 {
            return Err(sandbox("make a process group")(io::Error::last_os_error()));
        }
        tie_to_parent(self.supervisor).map_err(sandbox("tie to the supervisor"))?;
        for &fd in &self.join_fds {
            // SAFETY: writes two bytes from a static buffer.
            if unsafe { libc::write(fd, b"0\n".as_ptr().cast(), 2) } < 0 {
                return Err(sandbox("join the cgroup")(io::Error::last_os_error()));
            }
        }
        if self.isolate_network {
            network::isolate().map_err(sandbox("make the network namespace"))?;
        }
        match &self.view {
            Some(view) => view.enter().map_err(sandbox("build the filesystem view"))?,
            None if self.own_proc => view::own_proc().map_err(sandbox("mount a /proc"))?,
            None => {}
        }
        if let Some(status) = self.init_status {
            init::become_init(status).map_err(sandbox("start the namespace's init"))?;
            tie_to_parent(self.supervisor).map_err(sandbox("tie to the supervisor"))?;
        }
        // Built inside the view, so that its rules name the view's paths.
        let mut landlock = self
            .landlock
            .take()
            .map(|rules| filesystem::prepare(&rules))
            .transpose()?;
        self.channel
            .write_all(&[READY])
            .map_err(sandbox("say it is ready"))?;
        let (admit, trees) = receive(&mut self.channel)?;
        self.enter(&admit, trees, &mut landlock)?;
        Err(execute(&admit))
    }

    /// Places the attempt's paths, sets its limits, becomes its user and
    /// restricts itself: everything but the exec.
    fn enter(
        &mut self,
        admit: &Admit,
        trees: Vec<OwnedFd>,
        landlock: &mut Option<filesystem::Prepared>,
    ) -> Result<(), String> {
        let failed = cannot;
        let mounts: Vec<AttemptMount> = trees
            .into_iter()
            .zip(&admit.mounts)
            .map(|(tree, (at, access, directory))| AttemptMount {
                tree,
                at: at.clone(),
                access: *access,
                directory: *directory,
            })
            .collect();
        match &self.view {
            Some(view) => view
                .admit(&mounts, &admit.workspace)
                .map_err(failed("place the workspace in the view"))?,
            None => std::env::set_current_dir(&admit.workspace)
                .map_err(failed("enter the workspace"))?,
        }
        drop(mounts);
        set_limit(libc::RLIMIT_CORE, Some(0)).map_err(failed("set a limit"))?;
        set_limit(libc::RLIMIT_NOFILE, admit.open_files).map_err(failed("set a limit"))?;
        set_limit(libc::RLIMIT_FSIZE, admit.disk).map_err(failed("set a limit"))?;
        if let Some(user) = self.user {
            // SAFETY: plain system calls on integers; a null list with a
            // zero length drops every supplementary group.
            unsafe {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(user.gid) != 0
                    || libc::setuid(user.uid) != 0
                {
                    return Err(failed("change user")(io::Error::last_os_error()));
                }
            }
        }
        tie_to_parent(self.supervisor).map_err(failed("tie to the supervisor"))?;
        reset_signals().map_err(failed("reset the signal mask"))?;
        // Only stdio and the channel (close-on-exec) cross into the trainer.
        // SAFETY: marks descriptors close-on-exec; kernels before 5.11
        // lack the call, and there every descriptor here is so already.
        unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if let Some(rules) = landlock.take() {
            rules
                .allow_read_write(&admit.read_write)?
                .restrict_self()
                .map_err(failed("restrict itself with Landlock"))?;
        }
        if let Some(filter) = self.seccomp.take() {
            filter
                .install()
                .map_err(failed("install the system-call filter"))?;
        }
        Ok(())
    }
}

/// The reason for a failed step, for the host's operator.
fn cannot(what: &'static str) -> impl Fn(io::Error) -> String {
    move |e| format!("cannot {what}: {}", describe(&e))
}

/// The attempt, with the detached copies of its paths.
fn receive(channel: &mut UnixStream) -> Result<(Admit, Vec<OwnedFd>), String> {
    let lost = |e: io::Error| format!("cannot read its launch: {e}");
    let mut head = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; MAX_MOUNTS]);
    let (got, trees) = {
        let mut iov = [IoSliceMut::new(&mut head)];
        let message = recvmsg::<()>(
            channel.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|e| lost(e.into()))?;
        let mut trees = vec![];
        for cmsg in message.cmsgs().map_err(|e| lost(e.into()))? {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                // SAFETY: the kernel just gave this process these descriptors.
                trees.extend(
                    fds.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        (message.bytes, trees)
    };
    if got == 0 {
        return Err("the supervisor closed the sandbox before its launch".into());
    }
    channel.read_exact(&mut head[got..]).map_err(lost)?;
    let mut body = vec![0u8; u32::from_be_bytes(head) as usize];
    channel.read_exact(&mut body).map_err(lost)?;
    let admit: Admit = serde_json::from_slice(&body).map_err(|e| format!("a bad launch: {e}"))?;
    if trees.len() != admit.mounts.len() {
        return Err(format!(
            "{} paths to place came with {} copies",
            admit.mounts.len(),
            trees.len()
        ));
    }
    Ok((admit, trees))
}

/// Back to the default disposition of every signal the supervisor
/// changed, and an empty signal mask: what the trainer starts with.
fn reset_signals() -> io::Result<()> {
    // SAFETY: signal and sigprocmask on integers and a local set.
    unsafe {
        for signal in TERMINAL_SIGNALS {
            libc::signal(signal as libc::c_int, libc::SIG_DFL);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut unblocked = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(unblocked.as_mut_ptr());
        if libc::sigprocmask(libc::SIG_SETMASK, unblocked.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Executes the program; returns only why it could not.
fn execute(admit: &Admit) -> String {
    // A bare name would make exec search PATH; the host resolved the
    // executable already, so a name without a slash means the working
    // directory.
    let program = if admit.executable.components().count() == 1 && !admit.executable.is_absolute() {
        Path::new(".").join(&admit.executable)
    } else {
        admit.executable.clone()
    };
    let cannot = |reason: &str| format!("cannot execute {}: {reason}", admit.executable.display());
    let c = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| cannot("a NUL byte in its command line or environment"))
    };
    let built = (|| {
        let program = c(program.as_os_str().as_bytes())?;
        let mut argv = vec![c(admit.argv0.as_bytes())?];
        for arg in &admit.args {
            argv.push(c(arg.as_bytes())?);
        }
        let env = admit
            .env
            .iter()
            .map(|(name, value)| c(format!("{name}={value}").as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok::<_, String>((program, argv, env))
    })();
    match built {
        Ok((program, argv, env)) => match nix::unistd::execve(&program, &argv, &env) {
            Err(errno) => cannot(errno.desc()),
            Ok(never) => match never {},
        },
        Err(reason) => reason,
    }
}
