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

mod control;
mod policy;
mod spawn;

use crate::process::wire::{HostMessage, Report};
use crate::process::Deadline;
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
    match run(std::env::args_os().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("trainyard-supervise: {error}");
            ExitCode::from(2)
        }
    }
}

fn run(args: impl Iterator<Item = std::ffi::OsString>) -> Result<(), SuperviseError> {
    let invocation = Invocation::parse(args)?;
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
    let pid = match spawn::start_trainer(&invocation) {
        Ok(pid) => pid,
        Err(reason) => {
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(());
        }
    };
    let group = Pid::from_raw(pid as i32);
    let trainer_exit = match pidfd_open(group) {
        Ok(fd) => fd,
        Err(errno) => {
            kill_group(group, Signal::SIGKILL);
            reap_trainer(group);
            reap_group(group);
            let reason = format!("cannot watch the trainer (pidfd_open: {})", errno.desc());
            let _ = control.send(&Report::SpawnFailed(reason));
            return Ok(());
        }
    };
    let mut supervision = Supervision::new(lease);
    let mut host = Some(control);
    let watched = watch(
        &mut supervision,
        &mut host,
        &trainer_exit,
        &timers,
        &term,
        group,
    );

    // The trainer is a zombie now (or, if watching failed, is killed here),
    // so its pid still names the group: kill what is left of the group
    // before reaping frees that number.
    kill_group(group, Signal::SIGKILL);
    let status = reap_trainer(group);
    reap_group(group);
    watched?;
    if let (Some(control), Some(status)) = (host.as_mut(), status) {
        let _ = control.send(&supervision.outcome(status));
    }
    Ok(())
}

/// Tells the host the trainer started, then waits until the trainer has
/// exited, acting on every event meanwhile.
fn watch(
    supervision: &mut Supervision,
    host: &mut Option<ControlSocket>,
    trainer_exit: &OwnedFd,
    timers: &Timers,
    term: &SignalFd,
    group: Pid,
) -> Result<(), SuperviseError> {
    if let Some(control) = host.as_mut() {
        if control
            .send(&Report::Started {
                pid: group.as_raw() as u32,
            })
            .is_err()
        {
            *host = None;
            apply(supervision, Event::HostGone, group, timers)?;
        }
    }
    loop {
        let (exited, timer_fired, terminated, host_ready) = {
            let mut fds = vec![
                PollFd::new(trainer_exit.as_fd(), PollFlags::POLLIN),
                PollFd::new(timers.lease.as_fd(), PollFlags::POLLIN),
                PollFd::new(timers.grace.as_fd(), PollFlags::POLLIN),
                PollFd::new(term.as_fd(), PollFlags::POLLIN),
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
            (ready(0), ready(1) || ready(2), ready(3), ready(4))
        };
        if exited {
            return Ok(());
        }
        if timer_fired {
            timers.clear();
            apply(supervision, Event::Tick, group, timers)?;
        }
        if terminated {
            while let Ok(Some(_)) = term.read_signal() {}
            apply(supervision, Event::Terminate, group, timers)?;
        }
        if host_ready {
            let read = host.as_mut().map(ControlSocket::read_ready);
            match read {
                Some(Ok(messages)) => {
                    for message in messages {
                        apply(supervision, Event::Host(message), group, timers)?;
                    }
                }
                // End-of-file, an error or garbage: the host is gone (or
                // broken), and nobody can renew the lease any more.
                Some(Err(_)) | None => {
                    *host = None;
                    apply(supervision, Event::HostGone, group, timers)?;
                }
            }
        }
    }
}

fn apply(
    supervision: &mut Supervision,
    event: Event,
    group: Pid,
    timers: &Timers,
) -> Result<(), SuperviseError> {
    for effect in supervision.handle(event, Deadline::now()) {
        match effect {
            Effect::SignalGroup(signal) => kill_group(group, signal),
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
/// armed at absolute instants.
struct Timers {
    lease: TimerFd,
    grace: TimerFd,
}

impl Timers {
    fn new() -> Result<Self, SuperviseError> {
        let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
        let lease = TimerFd::new(ClockId::CLOCK_BOOTTIME, flags).map_err(setup("timerfd"))?;
        let grace = TimerFd::new(ClockId::CLOCK_BOOTTIME, flags).map_err(setup("timerfd"))?;
        Ok(Self { lease, grace })
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
