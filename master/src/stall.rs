//! Stalled trainers, as the master sees them: what a STALLED attempt does
//! to its task, and how long a running attempt has been quiet. No I/O here.
//!
//! A trainer that is alive but reports no progress for its task's
//! `progress_timeout_secs` is stopped by its host, which sees the progress
//! first-hand (why there, and why the master's recovery sweep is only the
//! backstop through leases: `trainyard_host::attempt::stall`). The host
//! reports `Outcome::Stalled`; the master records the attempt as STALLED —
//! a reason of its own, not FAILED, LEASE_LOST (dead) or a timeout — and
//! requeues the task, whose next attempt starts from its last checkpoint.
//!
//! A hang is often the environment's (a stuck data loader, a lost
//! collective, a wedged GPU) rather than the trainer's, so a task's first
//! `master.free_stalled_retries` stalls (default 1) do not use one of its
//! attempts, as a host fault does not; later ones do, so a trainer that
//! hangs every time still fails after its `max_attempts`.

use crate::model::{AttemptOutcome, TaskDetail, TaskStatus};
use crate::recovery::{after_unsuccessful, LiveTask, ReportDecision, Settle};

/// Default of `master.free_stalled_retries`.
pub const DEFAULT_FREE_STALLED_RETRIES: u32 = 1;

/// Whether a stalled attempt uses one of its task's attempts, after
/// `earlier` stalls of the same task: not while fewer than `free` came
/// before it.
pub fn uses_an_attempt(earlier: u32, free: u32) -> bool {
    earlier >= free
}

/// The decision for a STALLED report: requeued (or failed once its attempts
/// are used up, or cancelled if asked), counting as a run only when
/// `counted`.
pub fn decision(task: &LiveTask, message: &str, counted: bool) -> ReportDecision {
    ReportDecision {
        outcome: AttemptOutcome::Stalled,
        error: Some(message.to_string()),
        metrics: None,
        then: Settle::from(after_unsuccessful(task, counted, message)),
    }
}

/// How long a running attempt has been quiet at `now_ms`: since its last
/// progress, as the master heard it (`progress_at_ms`, of this attempt),
/// or since it started when it has reported none. `None` when neither is
/// known.
pub fn quiet_for_ms(
    now_ms: i64,
    progress_at_ms: Option<i64>,
    started_at_ms: Option<i64>,
) -> Option<u64> {
    let since = match (progress_at_ms, started_at_ms) {
        (Some(p), Some(s)) => p.max(s),
        (p, s) => p.or(s)?,
    };
    Some(u64::try_from(now_ms.saturating_sub(since)).unwrap_or(0))
}

/// How long a task's current attempt has been quiet, while it is RUNNING.
pub fn detail_quiet_for_ms(detail: &TaskDetail, now_ms: i64) -> Option<u64> {
    let task = &detail.task;
    if task.status != TaskStatus::Running {
        return None;
    }
    let progress = (task.progress.as_ref())
        .filter(|p| p.attempt == task.attempt)
        .map(|p| p.at_ms);
    let started = (detail.attempts.iter())
        .find(|a| a.attempt == task.attempt)
        .and_then(|a| a.started_at_ms);
    quiet_for_ms(now_ms, progress, started)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(runs: u32, max_attempts: u32) -> LiveTask {
        LiveTask {
            status: TaskStatus::Running,
            attempt: runs,
            host: "h1".into(),
            dispatch_deadline_ms: None,
            cancel_requested: false,
            runs,
            max_attempts,
        }
    }

    #[test]
    fn a_tasks_first_stall_is_free_and_later_ones_count() {
        assert!(!uses_an_attempt(0, 1));
        assert!(uses_an_attempt(1, 1));
        assert!(
            uses_an_attempt(0, 0),
            "free_stalled_retries = 0: every stall counts"
        );
        assert!(!uses_an_attempt(1, 2));
    }

    #[test]
    fn a_free_stall_on_the_last_attempt_requeues_and_a_counted_one_fails() {
        let last = running(1, 1);
        let free = decision(&last, "stalled: no progress for 20 s", false);
        assert_eq!(free.outcome, AttemptOutcome::Stalled);
        assert_eq!(free.then, Settle::Requeue);
        let counted = decision(&last, "stalled: no progress for 20 s", true);
        assert!(
            matches!(&counted.then, Settle::Fail(m) if m.contains("gave up after 1 attempt; last: stalled")),
            "{:?}",
            counted.then
        );
        assert_eq!(
            decision(&running(1, 3), "stalled", true).then,
            Settle::Requeue
        );
        let cancelled = LiveTask {
            cancel_requested: true,
            ..running(1, 3)
        };
        assert_eq!(decision(&cancelled, "stalled", false).then, Settle::Cancel);
    }

    #[test]
    fn quiet_is_counted_from_the_last_progress_or_the_start() {
        assert_eq!(quiet_for_ms(10_000, Some(7_000), Some(1_000)), Some(3_000));
        assert_eq!(quiet_for_ms(10_000, None, Some(1_000)), Some(9_000));
        assert_eq!(
            quiet_for_ms(10_000, Some(500), Some(1_000)),
            Some(9_000),
            "progress of an earlier attempt is older than this one's start"
        );
        assert_eq!(quiet_for_ms(10_000, None, None), None);
        assert_eq!(
            quiet_for_ms(1_000, Some(2_000), None),
            Some(0),
            "clocks may disagree"
        );
    }
}
