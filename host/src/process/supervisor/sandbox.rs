//! A sandbox prepared ahead of its attempt (`trainyard-supervise
//! --prepare <plan>`): the supervisor makes the cgroup under a name of its
//! own, the system-call filter and the view's steps, forks the waiting
//! trainer ([`super::waiting`]) into a new PID namespace, and once that
//! one has joined everything and says it is ready, tells the host
//! `prepared`. The one launch order it then gets renames the cgroup to
//! the attempt's and sets its limits, hands the attempt's workspace (a
//! detached copy of its mount, made here in the host's mount namespace) to
//! the waiting trainer, and waits until that one has executed its program.
//!
//! Nothing of a sandbox serves a second attempt: the supervisor, its
//! processes, cgroup and namespaces end with the one attempt (or, unused,
//! when the host closes the socket or dies).

use super::confine::Confined;
use super::control::{ControlError, ControlSocket};
use super::init::StatusPipe;
use super::spawn::pidfd_of_self;
use super::spawn::UsageError;
use super::waiting::{Admit, Waiting, FAILED, MAX_MOUNTS, READY};
use super::{pidfd_open, reap_trainer};
use super::{setup, supervise, take_over_signals, Launched, SuperviseError, Timers};
use crate::containment::cgroup::AttemptCgroup;
use crate::containment::sandbox::SandboxPlan;
use crate::containment::{seccomp, view, Limits};
use crate::process::wire::LaunchOrder;
use crate::process::wire::Report;
use crate::process::Deadline;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use nix::unistd::Pid;
use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// A prepared sandbox's supervisor: prepares it, says so, waits for its
/// one launch order and supervises that trainer as [`super::run`] does.
pub(super) fn run(plan: Option<std::ffi::OsString>) -> Result<(), SuperviseError> {
    let plan = plan
        .as_deref()
        .and_then(std::ffi::OsStr::to_str)
        .ok_or(UsageError::Usage)?;
    let plan: SandboxPlan =
        serde_json::from_str(plan).map_err(|e| UsageError::Confinement(e.to_string()))?;
    let host_process = nix::unistd::getppid();
    let mut control = ControlSocket::from_stdin()?;
    let term = take_over_signals()?;
    let sandbox = match Sandbox::prepare(&plan) {
        Ok(sandbox) => sandbox,
        Err(reason) => {
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(());
        }
    };
    let unused = |sandbox: Sandbox| {
        sandbox.discard();
        if nix::unistd::getppid() != host_process {
            if let Some(dir) = &plan.cgroup_dir {
                crate::containment::cgroup::remove_empty_tree(dir);
            }
        }
    };
    if control.send(&Report::Prepared).is_err() {
        unused(sandbox);
        return Ok(());
    }
    let order = match wait_for_launch(&mut control, &sandbox, &term) {
        Ok(Some(order)) => order,
        Ok(None) => {
            unused(sandbox);
            return Ok(());
        }
        Err(error) => {
            unused(sandbox);
            return Err(error);
        }
    };
    let lease = order.deadline();
    if lease.has_passed(Deadline::now()) {
        let _ = control.send(&Report::DeadlinePassed);
        unused(sandbox);
        return Ok(());
    }
    let timers = match Timers::new().and_then(|timers| timers.arm_lease(lease).map(|()| timers)) {
        Ok(timers) => timers,
        Err(error) => {
            let _ = control.send(&Report::SpawnFailed(error.to_string()));
            unused(sandbox);
            return Err(error);
        }
    };
    let (confined, group, trainer_exit) = match sandbox.launch(&order) {
        Ok(launched) => launched,
        Err(reason) => {
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(());
        }
    };
    if let Some(quota) = confined.workspace_quota() {
        timers.arm_disk_checks(quota)?;
    }
    let launched = Launched {
        confined: Some(confined),
        group,
        trainer_exit,
    };
    supervise(launched, lease, control, &timers, &term, host_process)
}

/// Waits for the host's launch order; `None` if the host went away (or
/// sent something else), the sandbox's trainer ended, or the supervisor
/// was told to end.
fn wait_for_launch(
    control: &mut ControlSocket,
    sandbox: &Sandbox,
    term: &SignalFd,
) -> Result<Option<LaunchOrder>, SuperviseError> {
    loop {
        let mut fds = [
            PollFd::new(control.as_fd(), PollFlags::POLLIN),
            PollFd::new(sandbox.ended(), PollFlags::POLLIN),
            PollFd::new(term.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(setup("poll")(errno)),
        }
        let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
        if ready(1) || ready(2) {
            return Ok(None);
        }
        if ready(0) {
            return match control.read_launch() {
                Ok(order) => Ok(Some(order)),
                Err(ControlError::Malformed(error)) => {
                    let _ = control.send(&Report::SpawnFailed(error.to_string()));
                    Ok(None)
                }
                Err(_) => Ok(None),
            };
        }
    }
}

/// What the waiting trainer says on its channel.
enum Word {
    /// It is ready for its launch.
    Ready,
    /// Its end closed without a word: on exec, after its launch.
    Ended,
    /// Why it cannot go on; it has exited.
    Failed(String),
}

/// A sandbox whose waiting trainer is ready.
pub(crate) struct Sandbox {
    cgroup: Option<AttemptCgroup>,
    cgroup_path: Option<String>,
    /// The supervisor's child: the namespace's `init` with a PID
    /// namespace, else the waiting trainer itself. Its process group is
    /// the trainer's.
    first: Pid,
    /// Readable once `first` has ended.
    first_exit: OwnedFd,
    channel: UnixStream,
    status: Option<StatusPipe>,
    /// Whether it has a filesystem view the attempt's paths go into.
    view: bool,
}

impl Sandbox {
    /// Makes the sandbox of `plan` and waits until its trainer is ready.
    /// On error, nothing is left behind.
    pub(crate) fn prepare(plan: &SandboxPlan) -> Result<Sandbox, String> {
        let seccomp = plan.seccomp.as_deref().map(seccomp::prepare).transpose()?;
        let view = plan
            .view
            .as_ref()
            .map(view::SandboxViewPrepared::new)
            .transpose()
            .map_err(|e| format!("cannot prepare the trainer's filesystem view: {e}"))?;
        let mut status = plan
            .pid_namespace
            .then(StatusPipe::new)
            .transpose()
            .map_err(|e| format!("cannot make the trainer's status pipe: {e}"))?;
        let (channel, theirs) =
            UnixStream::pair().map_err(|e| format!("cannot make the sandbox's channel: {e}"))?;
        let supervisor =
            pidfd_of_self().map_err(|e| format!("cannot watch the supervisor: {e}"))?;
        let cgroup_path = plan
            .cgroup_dir
            .as_ref()
            .map(|dir| format!("{dir}/sandbox-{}", std::process::id()));
        let cgroup = cgroup_path
            .as_deref()
            .map(|path| AttemptCgroup::create(path, &Limits::default()))
            .transpose()?;
        let discard = |cgroup: Option<AttemptCgroup>| {
            if let Some(cgroup) = cgroup {
                let _ = cgroup.remove();
            }
        };
        if plan.pid_namespace {
            if let Err(errno) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID) {
                discard(cgroup);
                return Err(format!(
                    "cannot make the trainer's PID namespace: {}",
                    errno.desc()
                ));
            }
        }
        let waiting = Waiting {
            join_fds: cgroup
                .as_ref()
                .map(AttemptCgroup::join_fds)
                .unwrap_or_default(),
            isolate_network: plan.isolate_network,
            own_proc: plan.pid_namespace && view.is_none(),
            view,
            init_status: status.as_ref().map(StatusPipe::write_end),
            user: plan.user,
            landlock: plan.filesystem.clone(),
            seccomp,
            channel: theirs,
            supervisor: supervisor.as_raw_fd(),
        };
        // SAFETY: the supervisor runs no other thread, so the child may do
        // anything; it never returns ([`Waiting::run`]).
        let first = match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => waiting.run(),
            Ok(nix::unistd::ForkResult::Parent { child }) => child,
            Err(errno) => {
                discard(cgroup);
                return Err(format!("cannot fork the sandbox: {}", errno.desc()));
            }
        };
        // Both sides set the group, so it is set whichever runs first.
        let _ = nix::unistd::setpgid(first, first);
        drop(waiting);
        if let Some(status) = status.as_mut() {
            status.close_write_end();
        }
        let first_exit = match pidfd_open(first) {
            Ok(fd) => fd,
            Err(errno) => {
                let _ = killpg(first, Signal::SIGKILL);
                reap_trainer(first);
                discard(cgroup);
                return Err(format!("cannot watch the sandbox: {}", errno.desc()));
            }
        };
        let mut sandbox = Sandbox {
            cgroup,
            cgroup_path,
            first,
            first_exit,
            channel,
            status,
            view: plan.view.is_some(),
        };
        let failure = match sandbox.answer() {
            Word::Ready => return Ok(sandbox),
            Word::Ended => "the sandbox's trainer ended while it was prepared".to_string(),
            Word::Failed(reason) => reason,
        };
        sandbox.discard();
        Err(failure)
    }

    /// Readable once the sandbox's first process has ended: it can no
    /// longer serve.
    pub(crate) fn ended(&self) -> BorrowedFd<'_> {
        self.first_exit.as_fd()
    }

    /// The waiting trainer's next word.
    fn answer(&mut self) -> Word {
        let mut first = [0u8; 1];
        loop {
            match self.channel.read(&mut first) {
                Ok(0) => return Word::Ended,
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Word::Failed(format!("the sandbox's channel failed: {e}")),
            }
        }
        match first[0] {
            READY => Word::Ready,
            FAILED => {
                let mut reason = vec![];
                let _ = self.channel.read_to_end(&mut reason);
                Word::Failed(String::from_utf8_lossy(&reason).into_owned())
            }
            _ => Word::Failed("the sandbox's trainer said something unexpected".into()),
        }
    }

    /// Launches the trainer of `order`: the cgroup renamed to the
    /// attempt's, with its limits; the attempt's paths handed over; its
    /// program executed. Returns the confinement, the trainer's group and
    /// a pidfd of the sandbox's first process, or why it could not start
    /// (nothing is left of the sandbox then).
    pub(crate) fn launch(
        mut self,
        order: &LaunchOrder,
    ) -> Result<(Confined, Pid, OwnedFd), String> {
        let admission = &order.admission;
        if let (Some(cgroup), Some(relative)) = (self.cgroup.take(), admission.cgroup.as_deref()) {
            match cgroup.rename(relative, &admission.limits) {
                Ok(renamed) => {
                    self.cgroup = Some(renamed);
                    self.cgroup_path = Some(relative.to_string());
                }
                Err(reason) => {
                    // Whatever name it has now, it is emptied by its path.
                    self.cgroup = self.cgroup_path.as_deref().map(AttemptCgroup::load);
                    self.discard();
                    return Err(reason);
                }
            }
        }
        if let Err(reason) = self.admit(order) {
            self.discard();
            return Err(reason);
        }
        match self.answer() {
            // Its end of the channel closed on exec.
            Word::Ended => {}
            Word::Failed(reason) => {
                self.discard();
                return Err(reason);
            }
            Word::Ready => {
                self.discard();
                return Err("the sandbox's trainer said it was ready twice".into());
            }
        }
        let confined = Confined::admitted(
            self.cgroup.take(),
            self.cgroup_path.take(),
            admission.limits.clone(),
            admission.workspace.clone(),
            admission.workspace_quota,
            self.status.take(),
        );
        Ok((confined, self.first, self.first_exit))
    }

    /// Sends the waiting trainer its attempt, with a detached copy of each
    /// of the attempt's paths that exists.
    fn admit(&mut self, order: &LaunchOrder) -> Result<(), String> {
        let admission = &order.admission;
        let mut mounts = vec![];
        let mut trees = vec![];
        // Without a view, the trainer sees the host's paths themselves.
        let own_paths = if self.view {
            admission.mounts()
        } else {
            vec![]
        };
        for (path, access) in own_paths {
            let Ok(metadata) = std::fs::metadata(&path) else {
                continue;
            };
            let tree = view::detached_copy(&path)
                .map_err(|e| format!("cannot hand {} to the sandbox: {e}", path.display()))?;
            mounts.push((path, access, metadata.is_dir()));
            trees.push(tree);
        }
        if trees.len() > MAX_MOUNTS {
            return Err(format!(
                "the attempt brings {} paths to its view, over the limit of {MAX_MOUNTS}",
                trees.len()
            ));
        }
        let admit = Admit {
            mounts,
            read_write: admission.read_write(self.view),
            workspace: admission.workspace.clone(),
            open_files: admission.limits.open_files,
            disk: admission.limits.disk,
            executable: order.executable.clone(),
            argv0: order.argv0.clone(),
            args: order.args.clone(),
            env: order.env.clone(),
        };
        let body = serde_json::to_vec(&admit).map_err(|e| e.to_string())?;
        let head = (body.len() as u32).to_be_bytes();
        let fds: Vec<_> = trees.iter().map(AsRawFd::as_raw_fd).collect();
        let lost = |e: std::io::Error| format!("the sandbox's trainer is gone: {e}");
        sendmsg::<()>(
            self.channel.as_raw_fd(),
            &[IoSlice::new(&head)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| lost(e.into()))?;
        self.channel.write_all(&body).map_err(lost)
    }

    /// Ends an unused (or failed) sandbox: its processes killed and
    /// reaped, its cgroup emptied and removed.
    pub(crate) fn discard(mut self) {
        let _ = killpg(self.first, Signal::SIGKILL);
        if let Some(cgroup) = &self.cgroup {
            cgroup.signal(Signal::SIGKILL);
        }
        reap_trainer(self.first);
        let mut confined = Confined::admitted(
            self.cgroup.take(),
            self.cgroup_path.take(),
            Limits::default(),
            Default::default(),
            None,
            self.status.take(),
        );
        super::end_attempt(Some(&mut confined), self.first);
    }
}
