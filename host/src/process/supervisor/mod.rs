//! `trainyard-supervise`: the small process that stands between the host and
//! one trainer, and kills the trainer's whole process group on its own when
//! the lease deadline the host last gave it passes — even if the host is
//! frozen and can kill nothing itself.
//!
//! It is started by [`crate::process::Trainer::spawn`] as
//! `trainyard-supervise <executable> <argv0> [args...]`, with the trainer's
//! working directory, environment, stdout and stderr, and a control socket
//! as its standard input (messages in [`crate::process::wire`]); the trainer
//! gets `/dev/null` as standard input. It runs no threads: the trainer's
//! `PR_SET_PDEATHSIG` fires when the parent *thread* ends, and a single
//! `poll` loop over the control socket, a pidfd of the trainer, two
//! CLOCK_BOOTTIME timerfds and a signalfd for SIGTERM does all the waiting.
//!
//! It is a child subreaper, so processes the trainer started are re-parented
//! to it when their parent dies, and it reaps every member of the trainer's
//! group before it sends its final report: when the host reads `exited`,
//! `signaled` or `lease-expired`, no process of the group is left.

mod confine;
mod control;
mod init;
mod policy;
mod probe;
mod sandbox;
mod spawn;
mod waiting;

use crate::process::wire::{HostMessage, LimitBreach, Report};
use crate::process::Deadline;
use confine::Confined;
use control::{ControlError, ControlSocket};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, signal, SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use policy::{Effect, Event, Supervision, TrainerStatus};
use spawn::{Invocation, UsageError};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::process::ExitCode;
use std::time::Duration;

pub use control::CONTROL_FD;
pub use probe::PROBE_FLAG;
pub use spawn::CONFINE_FLAG;

/// The flag that makes the supervisor prepare a sandbox ahead of its
/// attempt, followed by the sandbox's plan as JSON
/// ([`crate::containment::sandbox::SandboxPlan`]).
pub const PREPARE_FLAG: &str = "--prepare";

/// Why the supervisor could not do its job at all.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("the host's first message must be the lease deadline, got {0:?}")]
    NoDeadline(HostMessage),
    #[error("cannot set up the supervisor ({what}): {errno}")]
    Setup { what: &'static str, errno: Errno },
}

fn setup(what: &'static str) -> impl FnOnce(Errno) -> SuperviseError {
    move |errno| SuperviseError::Setup { what, errno }
}

/// The whole program: exit status 0 once the final report is sent (or the
/// host is gone), 2 if the supervisor could not start supervising.
pub fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == PROBE_FLAG) {
        return probe::run(std::env::args_os().skip(2));
    }
    let ran = if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == PREPARE_FLAG)
    {
        sandbox::run(std::env::args_os().nth(2))
    } else {
        run(std::env::args_os().skip(1))
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("trainyard-supervise: {error}");
            ExitCode::from(2)
        }
    }
}

fn run(args: impl Iterator<Item = std::ffi::OsString>) -> Result<(), SuperviseError> {
    let invocation = Invocation::parse(args)?;
    // The host: once this process has another parent, the host has died.
    let host_process = nix::unistd::getppid();
    let mut control = ControlSocket::from_stdin()?;
    let term = take_over_signals()?;
    let lease = match control.read_first()? {
        HostMessage::Deadline(deadline) => deadline,
        other => return Err(SuperviseError::NoDeadline(other)),
    };
    if lease.has_passed(Deadline::now()) {
        // The lease may be another attempt's by now: starting would make two.
        let _ = control.send(&Report::DeadlinePassed);
        return Ok(());
    }
    // Armed before the trainer exists, so there is no moment it runs
    // without the lease being enforced.
    let timers = match Timers::new().and_then(|timers| timers.arm_lease(lease).map(|()| timers)) {
        Ok(timers) => timers,
        Err(error) => {
            let _ = control.send(&Report::SpawnFailed(error.to_string()));
            return Err(error);
        }
    };
    let Some(launched) = launch(&invocation, &mut control, &timers)? else {
        return Ok(());
    };
    supervise(launched, lease, control, &timers, &term, host_process)
}

/// A trainer started: its confinement, its process group and a pidfd of
/// the supervisor's child (the trainer, or its namespace's first process).
struct Launched {
    confined: Option<Confined>,
    group: Pid,
    trainer_exit: OwnedFd,
}

/// Watches a started trainer until it has ended, then ends its attempt
/// and sends the final report.
fn supervise(
    launched: Launched,
    lease: Deadline,
    control: ControlSocket,
    timers: &Timers,
    term: &SignalFd,
    host_process: Pid,
) -> Result<(), SuperviseError> {
    let Launched {
        mut confined,
        group,
        trainer_exit,
    } = launched;
    let trainer = Trainer {
        group,
        confined: confined.as_ref(),
    };
    let mut supervision = Supervision::new(lease);
    let mut host = Some(control);
    let watched = watch(
        &mut supervision,
        &mut host,
        &trainer_exit,
        timers,
        term,
        &trainer,
    );

    // The trainer is a zombie now (or, if watching failed, is killed here),
    // so its pid still names the group: kill what is left of the group
    // before reaping frees that number.
    let group = trainer.group;
    trainer.signal(Signal::SIGKILL);
    let status = reap_trainer(group);
    // With a PID namespace the child reaped is its first process, which
    // passed on the trainer's own status (unless it was killed first).
    let status = confined
        .as_ref()
        .and_then(Confined::trainer_status)
        .map(TrainerStatus::from_wait)
        .or(status);
    let breach = end_attempt(confined.as_mut(), group)
        .or(timers.disk_breach.get())
        .or_else(|| confined.as_ref().and_then(quota_reached));
    if nix::unistd::getppid() != host_process {
        if let Some(confined) = confined.as_ref() {
            confined.release_host_directory();
        }
    }
    watched?;
    if let Some(control) = host.as_mut() {
        if let Some(breach) = breach {
            let _ = control.send(&Report::LimitExceeded(breach));
        }
        if let Some(status) = status {
            let _ = control.send(&supervision.outcome(status));
        }
    }
    Ok(())
}

/// Prepares the confinement, starts the trainer and watches it; `None`
/// when it could not be started (the host was told why).
fn launch(
    invocation: &Invocation,
    control: &mut ControlSocket,
    timers: &Timers,
) -> Result<Option<Launched>, SuperviseError> {
    let mut confined = match invocation.confinement.as_ref().map(Confined::prepare) {
        None => None,
        Some(Ok(confined)) => Some(confined),
        Some(Err(reason)) => {
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(None);
        }
    };
    if confined.as_ref().is_some_and(Confined::pid_namespace) {
        // The supervisor's next child, the trainer's, is the namespace's
        // first process; the supervisor itself stays where it is.
        if let Err(errno) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID) {
            end_attempt(confined.as_mut(), Pid::from_raw(0));
            let reason = format!("cannot make the trainer's PID namespace: {}", errno.desc());
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(None);
        }
    }
    let entry = confined.as_mut().and_then(Confined::take_entry);
    let started = spawn::start_trainer(invocation, entry);
    if let Some(confined) = confined.as_mut() {
        confined.started();
    }
    let pid = match started {
        Ok(pid) => pid,
        Err(reason) => {
            end_attempt(confined.as_mut(), Pid::from_raw(0));
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(None);
        }
    };
    let group = Pid::from_raw(pid as i32);
    let trainer_exit = match pidfd_open(group) {
        Ok(fd) => fd,
        Err(errno) => {
            let trainer = Trainer {
                group,
                confined: confined.as_ref(),
            };
            trainer.signal(Signal::SIGKILL);
            reap_trainer(group);
            end_attempt(confined.as_mut(), group);
            let reason = format!("cannot watch the trainer (pidfd_open: {})", errno.desc());
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(None);
        }
    };
    if let Some(quota) = confined.as_ref().and_then(Confined::workspace_quota) {
        timers.arm_disk_checks(quota)?;
    }
    Ok(Some(Launched {
        confined,
        group,
        trainer_exit,
    }))
}

/// The quota breach, if the workspace's filesystem is full: a write there
/// was refused, whatever the trainer made of it.
fn quota_reached(confined: &Confined) -> Option<LimitBreach> {
    let limit_bytes = confined.workspace_quota()?;
    crate::containment::quota::full(&confined.workspace)
        .then_some(LimitBreach::Disk { limit_bytes })
}

/// The trainer as the supervisor acts on it: its process group and, when it
/// is confined, its cgroup.
struct Trainer<'a> {
    group: Pid,
    confined: Option<&'a Confined>,
}

impl Trainer<'_> {
    /// Sends `signal` to the trainer's group and to every process of its
    /// cgroup, whatever group or session they moved to.
    fn signal(&self, signal: Signal) {
        kill_group(self.group, signal);
        if let Some(cgroup) = self.confined.and_then(Confined::cgroup) {
            cgroup.signal(signal);
        }
    }
}

/// After the trainer was reaped: no process of the attempt may remain.
/// With a cgroup, every process in it is killed and reaped and the cgroup
/// removed; without, what is left of the trainer's process group. Returns
/// the memory limit breach, if the kernel reported one.
fn end_attempt(confined: Option<&mut Confined>, group: Pid) -> Option<LimitBreach> {
    let Some(confined) = confined else {
        reap_group(group);
        return None;
    };
    let (breach, problems) = confined.end(reap_children);
    for problem in problems {
        eprintln!("trainyard-supervise: {problem}");
    }
    reap_children();
    breach
}

/// Tells the host the trainer started, then waits until the trainer has
/// exited, acting on every event meanwhile.
fn watch(
    supervision: &mut Supervision,
    host: &mut Option<ControlSocket>,
    trainer_exit: &OwnedFd,
    timers: &Timers,
    term: &SignalFd,
    trainer: &Trainer,
) -> Result<(), SuperviseError> {
    if let Some(control) = host.as_mut() {
        if control
            .send(&Report::Started {
                pid: trainer.group.as_raw() as u32,
            })
            .is_err()
        {
            *host = None;
            apply(supervision, Event::HostGone, trainer, timers)?;
        }
    }
    loop {
        let (exited, timer_fired, terminated, host_ready) = {
            let mut fds = vec![
                PollFd::new(trainer_exit.as_fd(), PollFlags::POLLIN),
                PollFd::new(timers.lease.as_fd(), PollFlags::POLLIN),
                PollFd::new(timers.grace.as_fd(), PollFlags::POLLIN),
                PollFd::new(term.as_fd(), PollFlags::POLLIN),
                PollFd::new(timers.disk.as_fd(), PollFlags::POLLIN),
            ];
            if let Some(control) = host.as_ref() {
                fds.push(PollFd::new(control.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(setup("poll")(errno)),
            }
            let ready = |i: usize| {
                fds.get(i)
                    .and_then(PollFd::revents)
                    .is_some_and(|r| !r.is_empty())
            };
            if ready(4) && timers.check_disk(trainer) {
                apply(supervision, Event::Host(HostMessage::Kill), trainer, timers)?;
            }
            (ready(0), ready(1) || ready(2), ready(3), ready(5))
        };
        if exited {
            return Ok(());
        }
        if timer_fired {
            timers.clear();
            apply(supervision, Event::Tick, trainer, timers)?;
        }
        if terminated {
            while let Ok(Some(_)) = term.read_signal() {}
            apply(supervision, Event::Terminate, trainer, timers)?;
        }
        if host_ready {
            let read = host.as_mut().map(ControlSocket::read_ready);
            match read {
                Some(Ok(messages)) => {
                    for message in messages {
                        apply(supervision, Event::Host(message), trainer, timers)?;
                    }
                }
                // End-of-file, an error or garbage: the host is gone (or
                // broken), and nobody can renew the lease any more.
                Some(Err(_)) | None => {
                    *host = None;
                    apply(supervision, Event::HostGone, trainer, timers)?;
                }
            }
        }
    }
}

fn apply(
    supervision: &mut Supervision,
    event: Event,
    trainer: &Trainer,
    timers: &Timers,
) -> Result<(), SuperviseError> {
    for effect in supervision.handle(event, Deadline::now()) {
        match effect {
            Effect::SignalGroup(signal) => trainer.signal(signal),
            Effect::ArmLeaseTimer(deadline) => timers.arm_lease(deadline)?,
            Effect::ArmGraceTimer(deadline) => timers.arm_grace(deadline)?,
        }
    }
    Ok(())
}

/// Ignores the terminal's signals and turns SIGTERM into a readable fd.
///
/// The supervisor shares the host's process group, so whatever the host's
/// terminal sends reaches it too: Ctrl-C must not end trainers behind the
/// host's back, and Ctrl-Z must not stop the one process that enforces the
/// lease while the host is stopped.
fn take_over_signals() -> Result<SignalFd, SuperviseError> {
    for ignored in spawn::TERMINAL_SIGNALS {
        // SAFETY: installing SIG_IGN runs no code in signal context.
        unsafe { signal(ignored, SigHandler::SigIgn) }.map_err(setup("ignore signals"))?;
    }
    // An inherited SIG_IGN for SIGCHLD would make the kernel reap the
    // trainer itself, and its exit status would be lost.
    // SAFETY: as above.
    unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) }.map_err(setup("reset SIGCHLD"))?;
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGTERM);
    mask.thread_block().map_err(setup("block SIGTERM"))?;
    let term = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(setup("signalfd"))?;
    // Orphaned members of the trainer's group come to this process, which
    // reaps them before reporting.
    nix::sys::prctl::set_child_subreaper(true).map_err(setup("become a subreaper"))?;
    Ok(term)
}

/// The lease timer and the stop-grace timer, both on CLOCK_BOOTTIME and
/// armed at absolute instants, and the periodic check of the workspace's
/// disk use.
struct Timers {
    lease: TimerFd,
    grace: TimerFd,
    disk: TimerFd,
    /// The workspace quota, once the checks are armed.
    disk_quota: std::cell::Cell<Option<u64>>,
    /// Set when the workspace went over its quota.
    disk_breach: std::cell::Cell<Option<LimitBreach>>,
}

impl Timers {
    fn new() -> Result<Self, SuperviseError> {
        let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
        let lease = TimerFd::new(ClockId::CLOCK_BOOTTIME, flags).map_err(setup("timerfd"))?;
        let grace = TimerFd::new(ClockId::CLOCK_BOOTTIME, flags).map_err(setup("timerfd"))?;
        let disk = TimerFd::new(ClockId::CLOCK_BOOTTIME, flags).map_err(setup("timerfd"))?;
        Ok(Self {
            lease,
            grace,
            disk,
            disk_quota: Default::default(),
            disk_breach: Default::default(),
        })
    }

    fn arm_disk_checks(&self, quota: u64) -> Result<(), SuperviseError> {
        self.disk_quota.set(Some(quota));
        let every = TimeSpec::from_duration(crate::containment::quota::CHECK_INTERVAL);
        self.disk
            .set(Expiration::Interval(every), TimerSetTimeFlags::empty())
            .map_err(setup("arm the disk check"))
    }

    /// Looks whether the workspace's filesystem is full (one `statfs`,
    /// whatever it holds); true the first time it is.
    fn check_disk(&self, trainer: &Trainer) -> bool {
        let mut count = [0u8; 8];
        let _ = nix::unistd::read(&self.disk, &mut count);
        if self.disk_quota.get().is_none() || self.disk_breach.get().is_some() {
            return false;
        }
        let Some(breach) = trainer.confined.and_then(quota_reached) else {
            return false;
        };
        self.disk_breach.set(Some(breach));
        true
    }

    fn arm_lease(&self, at: Deadline) -> Result<(), SuperviseError> {
        arm(&self.lease, at)
    }

    fn arm_grace(&self, at: Deadline) -> Result<(), SuperviseError> {
        arm(&self.grace, at)
    }

    /// Consumes the expirations so poll stops reporting them.
    fn clear(&self) {
        let mut count = [0u8; 8];
        let _ = nix::unistd::read(&self.lease, &mut count);
        let _ = nix::unistd::read(&self.grace, &mut count);
    }
}

fn arm(timer: &TimerFd, at: Deadline) -> Result<(), SuperviseError> {
    // An all-zero expiration would disarm the timer instead of firing it.
    let at = at.since_boot().max(Duration::from_nanos(1));
    timer
        .set(
            Expiration::OneShot(TimeSpec::from_duration(at)),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )
        .map_err(setup("arm a timer"))
}

fn pidfd_open(pid: Pid) -> Result<OwnedFd, Errno> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // (close-on-exec by definition) or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn kill_group(group: Pid, signal: Signal) {
    // ESRCH (the group is already empty) is the only expected failure.
    let _ = killpg(group, signal);
}

/// Reaps the trainer and returns how it ended.
fn reap_trainer(pid: Pid) -> Option<TrainerStatus> {
    loop {
        match waitpid(pid, None) {
            Ok(WaitStatus::Exited(_, code)) => return Some(TrainerStatus::Exited(code)),
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                return Some(TrainerStatus::Signaled(signal as i32))
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
}

/// Reaps every child that has ended, without waiting.
fn reap_children() {
    let any = Pid::from_raw(-1);
    while let Ok(status) = waitpid(any, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)) {
        if status == WaitStatus::StillAlive {
            return;
        }
    }
}

/// Reaps every remaining member of the trainer's process group (they were
/// sent SIGKILL and come to this process as it is their subreaper).
fn reap_group(group: Pid) {
    let members = Pid::from_raw(-group.as_raw());
    loop {
        match waitpid(members, Some(WaitPidFlag::__WALL)) {
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => return, // ECHILD: none left
        }
    }
}
