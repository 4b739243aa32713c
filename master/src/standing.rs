//! Whether a host takes new work: drained by an operator, quarantined after
//! failing for its own reasons, or open. Plain data and pure decisions; the
//! scheduler feeds them each attempt's ending and stores what they return
//! ([`crate::model::HostStanding`], in the database).
//!
//! **Quarantine.** A host is taken out of placement when
//! - its last `after_host_faults` attempts all failed for the host's own
//!   reasons (`HOST_FAULT`: a program it cannot execute, its workspace or
//!   cgroup set-up, its supervisor, a memory limit of its own too small to
//!   start a trainer), or
//! - at least `rate_min` of its last `rate_window` attempts failed within
//!   `quick_failure` of starting, at four times the rate or more of the
//!   rest of the fleet's last attempts (and at least 80 %): the task's
//!   fault by the host's account, the host's by the fleet's.
//!
//! **Probe.** A quarantined host gets one task (a probe) once
//! `probe_after` has passed, and no other while it runs. A probe that
//! completes lifts the quarantine. One that fails for the host's reasons
//! doubles the wait before the next (up to `probe_max`); any other ending
//! starts the same wait again. A host-caused failure costs the task
//! nothing, so a probe risks none of its attempts. An operator lifts a
//! quarantine at once with `trainyard hosts unquarantine ID`.
//!
//! **Drain.** A drained host takes no new work until undrained; its running
//! attempts finish, or (`--now`) are stopped and requeued without using an
//! attempt.

use crate::model::{AttemptOutcome, HostStanding, Quarantine};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// `master.quarantine`: when a host is quarantined and probed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuarantinePolicy {
    /// Host-caused failures in a row that quarantine a host; 0 turns the
    /// quarantine off.
    pub after_host_faults: u32,
    /// A failure this soon after its attempt started is quick.
    #[serde(with = "humantime_serde")]
    pub quick_failure: Duration,
    /// The last attempts of each host the quick-failure rate is taken over.
    pub rate_window: u32,
    /// Quick failures among them that may quarantine a host; 0 turns the
    /// rate rule off.
    pub rate_min: u32,
    /// How long a quarantined host waits for its first probe task.
    #[serde(with = "humantime_serde")]
    pub probe_after: Duration,
    /// The longest wait between probes, however many failed.
    #[serde(with = "humantime_serde")]
    pub probe_max: Duration,
}

impl Default for QuarantinePolicy {
    fn default() -> Self {
        Self {
            after_host_faults: 3,
            quick_failure: Duration::from_secs(10),
            rate_window: 10,
            rate_min: 6,
            probe_after: Duration::from_secs(60),
            probe_max: Duration::from_secs(30 * 60),
        }
    }
}

/// How one attempt on a host ended, as the quarantine counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The host's own fault.
    HostFault,
    /// The task's failure, soon after the start.
    QuickFailure,
    /// Anything else.
    Other,
}

impl Ending {
    /// The ending of an attempt with `outcome` that ran for `ran_for`.
    pub fn of(outcome: AttemptOutcome, ran_for: Duration, policy: &QuarantinePolicy) -> Ending {
        match outcome {
            AttemptOutcome::HostFault => Ending::HostFault,
            AttemptOutcome::Failed if ran_for < policy.quick_failure => Ending::QuickFailure,
            _ => Ending::Other,
        }
    }

    fn quick(self) -> bool {
        self != Ending::Other
    }
}

/// A host's recent endings, oldest first, at most the policy's window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recent(VecDeque<Ending>);

impl Recent {
    pub fn push(&mut self, ending: Ending, policy: &QuarantinePolicy) {
        let keep = policy.rate_window.max(policy.after_host_faults).max(1) as usize;
        self.0.push_back(ending);
        while self.0.len() > keep {
            self.0.pop_front();
        }
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    fn last(&self, n: usize) -> impl Iterator<Item = &Ending> {
        self.0.iter().skip(self.0.len().saturating_sub(n))
    }
}

/// Why a host with these recent endings should be quarantined, given the
/// rest of the fleet's; `None`: it should not.
pub fn verdict<'a>(
    host: &Recent,
    others: impl IntoIterator<Item = &'a Recent>,
    policy: &QuarantinePolicy,
) -> Option<String> {
    let n = policy.after_host_faults as usize;
    if n > 0 && host.0.len() >= n && host.last(n).all(|e| *e == Ending::HostFault) {
        return Some(format!(
            "its last {n} attempts failed for the host's own reasons"
        ));
    }
    let window = policy.rate_window as usize;
    let quick = host.last(window).filter(|e| e.quick()).count();
    let seen = host.last(window).count();
    if policy.rate_min == 0 || quick < policy.rate_min as usize || quick * 5 < seen * 4 {
        return None;
    }
    let (fleet_quick, fleet_seen) = others.into_iter().fold((0, 0), |(q, s), r| {
        let q2 = r.last(window).filter(|e| e.quick()).count();
        (q + q2, s + r.last(window).count())
    });
    // Without enough of the rest of the fleet to compare with, quick
    // failures are as likely the tasks' own.
    if fleet_seen < policy.rate_min as usize || quick * fleet_seen < 4 * fleet_quick * seen {
        return None;
    }
    Some(format!(
        "{quick} of its last {seen} attempts failed within {} of starting, against {fleet_quick} of {fleet_seen} on the other hosts",
        humantime::format_duration(policy.quick_failure)
    ))
}

/// What placement may give a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Quarantined, due a probe: one task, and only while it runs nothing.
    Probe,
    /// No new work, and why.
    Closed(String),
}

/// What placement may give a host with this standing at `now_ms`; `busy`:
/// it runs attempts the master gave it (a quarantined host's is its probe).
pub fn gate(standing: &HostStanding, now_ms: i64, busy: bool) -> Gate {
    if standing.drained_at_ms.is_some() {
        return Gate::Closed("drained by an operator".into());
    }
    let Some(q) = &standing.quarantine else {
        return Gate::Open;
    };
    let mut why = format!("quarantined: {}", q.reason);
    if let Some(e) = &q.last_error {
        why.push_str(&format!("; last error: {e}"));
    }
    if busy {
        why.push_str("; a probe task runs there");
    } else if now_ms >= q.next_probe_at_ms {
        return Gate::Probe;
    } else {
        let secs = (q.next_probe_at_ms - now_ms + 999) / 1000;
        why.push_str(&format!("; next probe task in {secs} s"));
    }
    Gate::Closed(why)
}

/// A new quarantine at `now_ms`.
pub fn quarantine(
    reason: String,
    last_error: Option<String>,
    now_ms: i64,
    policy: &QuarantinePolicy,
) -> Quarantine {
    Quarantine {
        since_ms: now_ms,
        reason,
        last_error,
        failed_probes: 0,
        next_probe_at_ms: now_ms + probe_wait(0, policy).as_millis() as i64,
    }
}

/// The wait before the next probe after `failed` failed ones.
pub fn probe_wait(failed: u32, policy: &QuarantinePolicy) -> Duration {
    let doubled = policy
        .probe_after
        .saturating_mul(1u32.checked_shl(failed.min(20)).unwrap_or(u32::MAX));
    doubled.min(policy.probe_max.max(policy.probe_after))
}

/// The quarantine after its probe ended with `outcome` (and `error`) at
/// `now_ms`; `None`: lifted.
pub fn after_probe(
    q: &Quarantine,
    outcome: AttemptOutcome,
    error: Option<&str>,
    now_ms: i64,
    policy: &QuarantinePolicy,
) -> Option<Quarantine> {
    match outcome {
        AttemptOutcome::Completed => None,
        AttemptOutcome::HostFault => {
            let failed_probes = q.failed_probes.saturating_add(1);
            Some(Quarantine {
                failed_probes,
                last_error: error.map(str::to_string).or(q.last_error.clone()),
                next_probe_at_ms: now_ms + probe_wait(failed_probes, policy).as_millis() as i64,
                ..q.clone()
            })
        }
        _ => Some(Quarantine {
            next_probe_at_ms: now_ms + probe_wait(q.failed_probes, policy).as_millis() as i64,
            ..q.clone()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recent(endings: &[Ending]) -> Recent {
        let mut r = Recent::default();
        for e in endings {
            r.push(*e, &QuarantinePolicy::default());
        }
        r
    }

    use Ending::{HostFault as H, Other as O, QuickFailure as Q};

    #[test]
    fn three_host_faults_in_a_row_quarantine_a_host_and_a_success_between_resets_the_count() {
        let p = QuarantinePolicy::default();
        let none: [&Recent; 0] = [];
        assert!(verdict(&recent(&[H, H]), none, &p).is_none());
        let why = verdict(&recent(&[O, H, H, H]), none, &p).unwrap();
        assert_eq!(why, "its last 3 attempts failed for the host's own reasons");
        assert!(verdict(&recent(&[H, H, O]), none, &p).is_none());
        let off = QuarantinePolicy {
            after_host_faults: 0,
            ..p
        };
        assert!(verdict(&recent(&[H, H, H]), none, &off).is_none());
    }

    #[test]
    fn quick_failures_quarantine_only_far_above_the_rest_of_the_fleets_rate() {
        let p = QuarantinePolicy::default();
        let host = recent(&[Q, Q, O, Q, Q, Q, Q, Q, Q, Q]);
        let healthy = recent(&[O, O, O, O, O, O, Q, O, O, O]);
        let why = verdict(&host, [&healthy], &p).unwrap();
        assert!(
            why.starts_with("9 of its last 10 attempts failed within 10s"),
            "{why}"
        );
        // The whole fleet fails as fast: the tasks' fault.
        let same = recent(&[Q, Q, Q, Q, Q, Q, O, Q, Q, Q]);
        assert!(verdict(&host, [&same], &p).is_none());
        // Nothing to compare with: the tasks' fault as likely.
        let none: [&Recent; 0] = [];
        assert!(verdict(&host, none, &p).is_none());
        // Too few quick failures.
        assert!(verdict(&recent(&[Q, Q, Q, Q, Q]), [&healthy], &p).is_none());
    }

    #[test]
    fn an_ending_is_quick_only_for_a_task_failure_soon_after_the_start() {
        let p = QuarantinePolicy::default();
        let s = Duration::from_secs;
        assert_eq!(Ending::of(AttemptOutcome::Failed, s(1), &p), Q);
        assert_eq!(Ending::of(AttemptOutcome::Failed, s(60), &p), O);
        assert_eq!(Ending::of(AttemptOutcome::HostFault, s(60), &p), H);
        assert_eq!(Ending::of(AttemptOutcome::Completed, s(1), &p), O);
        assert_eq!(Ending::of(AttemptOutcome::Cancelled, s(1), &p), O);
    }

    #[test]
    fn a_quarantined_host_is_closed_until_its_probe_is_due_then_takes_one_task() {
        let p = QuarantinePolicy::default();
        let q = quarantine(
            "its last 3 attempts failed".into(),
            Some("EACCES".into()),
            1_000,
            &p,
        );
        assert_eq!(q.next_probe_at_ms, 61_000);
        let standing = HostStanding {
            drained_at_ms: None,
            quarantine: Some(q),
        };
        match gate(&standing, 2_000, false) {
            Gate::Closed(why) => {
                assert!(
                    why.contains("quarantined: its last 3 attempts failed"),
                    "{why}"
                );
                assert!(why.contains("last error: EACCES"), "{why}");
                assert!(why.contains("next probe task in 59 s"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(gate(&standing, 61_000, false), Gate::Probe);
        assert!(
            matches!(gate(&standing, 61_000, true), Gate::Closed(w) if w.contains("a probe task runs"))
        );
        let drained = HostStanding {
            drained_at_ms: Some(5),
            ..standing
        };
        assert_eq!(
            gate(&drained, 61_000, false),
            Gate::Closed("drained by an operator".into())
        );
        assert_eq!(gate(&HostStanding::default(), 0, true), Gate::Open);
    }

    #[test]
    fn a_probe_that_completes_lifts_the_quarantine_and_a_failed_one_doubles_the_wait() {
        let p = QuarantinePolicy::default();
        let q = quarantine("r".into(), None, 0, &p);
        assert_eq!(
            after_probe(&q, AttemptOutcome::Completed, None, 70_000, &p),
            None
        );
        let again = after_probe(&q, AttemptOutcome::HostFault, Some("EACCES"), 70_000, &p).unwrap();
        assert_eq!(again.failed_probes, 1);
        assert_eq!(again.next_probe_at_ms, 70_000 + 120_000);
        assert_eq!(again.last_error.as_deref(), Some("EACCES"));
        assert_eq!(again.since_ms, 0, "quarantined since the first time");
        let other = after_probe(
            &again,
            AttemptOutcome::Failed,
            Some("bad params"),
            200_000,
            &p,
        )
        .unwrap();
        assert_eq!(other.failed_probes, 1);
        assert_eq!(other.next_probe_at_ms, 200_000 + 120_000);
        assert_eq!(probe_wait(30, &p), p.probe_max, "capped");
    }
}
