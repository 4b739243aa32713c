//! What a supervisor does about each thing that happens to it, as plain
//! decisions over plain data; [`super::run`] carries them out.
//!
//! The one rule everything else serves: once the lease deadline has passed,
//! the trainer's group is killed, and nothing the host says afterwards can
//! undo that. A renewal that arrives late is too late.

use crate::process::wire::{HostMessage, Report};
use crate::process::Deadline;
use nix::sys::signal::Signal;

/// Something that woke the supervisor up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A timer fired, or the supervisor looks at the clock for another reason.
    Tick,
    Host(HostMessage),
    /// The control socket reached end-of-file or failed: the host is gone.
    HostGone,
    /// The supervisor itself received SIGTERM.
    Terminate,
}

/// What the supervisor must do in response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    SignalGroup(Signal),
    ArmLeaseTimer(Deadline),
    ArmGraceTimer(Deadline),
}

/// How the trainer process itself ended, from `waitpid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrainerStatus {
    Exited(i32),
    Signaled(i32),
}

impl TrainerStatus {
    /// From a raw wait status (`waitpid`'s), as the first process of a PID
    /// namespace passes it on.
    pub(crate) fn from_wait(status: libc::c_int) -> TrainerStatus {
        if libc::WIFSIGNALED(status) {
            TrainerStatus::Signaled(libc::WTERMSIG(status))
        } else {
            TrainerStatus::Exited(libc::WEXITSTATUS(status))
        }
    }
}

/// The supervisor's state between events.
#[derive(Debug)]
pub(crate) struct Supervision {
    lease: Deadline,
    lease_expired: bool,
    /// When the grace of a `stop` ends; the earliest if several were asked.
    grace_end: Option<Deadline>,
    terminating: bool,
}

impl Supervision {
    pub(crate) fn new(lease: Deadline) -> Self {
        Self {
            lease,
            lease_expired: false,
            grace_end: None,
            terminating: false,
        }
    }

    /// Decides what to do about `event`, which happened at `now`.
    pub(crate) fn handle(&mut self, event: Event, now: Deadline) -> Vec<Effect> {
        let mut effects = Vec::new();
        // The clock is consulted before the event, so a deadline that passed
        // before a renewal was read is acted on, not overtaken by it.
        self.check_clock(now, &mut effects);
        match event {
            Event::Tick => {}
            Event::Host(HostMessage::Deadline(deadline)) => {
                if !self.lease_expired {
                    self.lease = deadline;
                    effects.push(Effect::ArmLeaseTimer(deadline));
                    self.check_clock(now, &mut effects);
                }
            }
            Event::Host(HostMessage::Stop { grace }) => {
                if self.grace_end.is_none() && !self.terminating {
                    effects.push(Effect::SignalGroup(Signal::SIGTERM));
                }
                let end = now.checked_add(grace);
                let end = self.grace_end.map_or(end, |earlier| earlier.min(end));
                self.grace_end = Some(end);
                effects.push(Effect::ArmGraceTimer(end));
                self.check_clock(now, &mut effects);
            }
            Event::Host(HostMessage::Kill) | Event::HostGone | Event::Terminate => {
                self.terminating = true;
                effects.push(Effect::SignalGroup(Signal::SIGKILL));
            }
        }
        effects
    }

    fn check_clock(&mut self, now: Deadline, effects: &mut Vec<Effect>) {
        if !self.lease_expired && self.lease.has_passed(now) {
            self.lease_expired = true;
            effects.push(Effect::SignalGroup(Signal::SIGKILL));
        }
        if let Some(end) = self.grace_end {
            if end.has_passed(now) && !self.terminating {
                self.terminating = true;
                effects.push(Effect::SignalGroup(Signal::SIGKILL));
            }
        }
    }

    /// The final report once the trainer has ended with `status`.
    pub(crate) fn outcome(&self, status: TrainerStatus) -> Report {
        if self.lease_expired {
            return Report::LeaseExpired;
        }
        match status {
            TrainerStatus::Exited(code) => Report::Exited(code),
            TrainerStatus::Signaled(signal) => Report::Signaled(signal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> Deadline {
        Deadline::from_boottime(Duration::from_secs(secs))
    }

    const KILL: Effect = Effect::SignalGroup(Signal::SIGKILL);
    const TERM: Effect = Effect::SignalGroup(Signal::SIGTERM);

    #[test]
    fn a_passed_on_wait_status_is_read_as_waitpid_would() {
        assert_eq!(TrainerStatus::from_wait(3 << 8), TrainerStatus::Exited(3));
        assert_eq!(TrainerStatus::from_wait(9), TrainerStatus::Signaled(9));
        assert_eq!(TrainerStatus::from_wait(0), TrainerStatus::Exited(0));
    }

    #[test]
    fn the_lease_passing_kills_the_group_once_and_is_reported() {
        let mut s = Supervision::new(at(100));
        assert_eq!(s.handle(Event::Tick, at(99)), []);
        assert_eq!(s.handle(Event::Tick, at(100)), [KILL]);
        assert_eq!(s.handle(Event::Tick, at(101)), []);
        assert_eq!(s.outcome(TrainerStatus::Signaled(9)), Report::LeaseExpired);
    }

    #[test]
    fn a_renewal_before_the_deadline_moves_it() {
        let mut s = Supervision::new(at(100));
        let renew = Event::Host(HostMessage::Deadline(at(200)));
        assert_eq!(s.handle(renew, at(50)), [Effect::ArmLeaseTimer(at(200))]);
        assert_eq!(s.handle(Event::Tick, at(150)), []);
        assert_eq!(s.outcome(TrainerStatus::Exited(0)), Report::Exited(0));
    }

    #[test]
    fn a_renewal_read_after_the_deadline_cannot_revive_the_lease() {
        let mut s = Supervision::new(at(100));
        let late = Event::Host(HostMessage::Deadline(at(200)));
        assert_eq!(s.handle(late, at(101)), [KILL]);
        assert_eq!(s.handle(Event::Tick, at(150)), []);
        assert_eq!(s.outcome(TrainerStatus::Signaled(9)), Report::LeaseExpired);
    }

    #[test]
    fn moving_the_deadline_into_the_past_kills_now() {
        let mut s = Supervision::new(at(100));
        let earlier = Event::Host(HostMessage::Deadline(at(10)));
        assert_eq!(
            s.handle(earlier, at(50)),
            [Effect::ArmLeaseTimer(at(10)), KILL]
        );
    }

    #[test]
    fn stop_terms_then_kills_when_the_grace_runs_out() {
        let mut s = Supervision::new(at(1000));
        let stop = Event::Host(HostMessage::Stop {
            grace: Duration::from_secs(5),
        });
        assert_eq!(
            s.handle(stop, at(10)),
            [TERM, Effect::ArmGraceTimer(at(15))]
        );
        assert_eq!(s.handle(Event::Tick, at(14)), []);
        assert_eq!(s.handle(Event::Tick, at(15)), [KILL]);
        // A trainer killed on request is reported by its signal, not as a lost lease.
        assert_eq!(s.outcome(TrainerStatus::Signaled(9)), Report::Signaled(9));
    }

    #[test]
    fn a_second_stop_can_only_shorten_the_grace() {
        let mut s = Supervision::new(at(1000));
        let stop = |secs| {
            Event::Host(HostMessage::Stop {
                grace: Duration::from_secs(secs),
            })
        };
        s.handle(stop(5), at(10));
        assert_eq!(s.handle(stop(60), at(11)), [Effect::ArmGraceTimer(at(15))]);
        assert_eq!(s.handle(stop(1), at(12)), [Effect::ArmGraceTimer(at(13))]);
    }

    #[test]
    fn the_host_going_away_kills_the_group() {
        let mut s = Supervision::new(at(1000));
        assert_eq!(s.handle(Event::HostGone, at(1)), [KILL]);
        let mut s = Supervision::new(at(1000));
        assert_eq!(s.handle(Event::Terminate, at(1)), [KILL]);
        let mut s = Supervision::new(at(1000));
        assert_eq!(s.handle(Event::Host(HostMessage::Kill), at(1)), [KILL]);
        assert_eq!(s.outcome(TrainerStatus::Signaled(9)), Report::Signaled(9));
    }
}
