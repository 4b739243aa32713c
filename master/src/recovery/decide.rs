//! What to do with a live task, decided from plain data: the seed's three
//! recovery cases, done without guessing, and the handling of an attempt's
//! final report. No I/O here; [`super::leases`] and the scheduler feed
//! these functions and carry out what they return.
//!
//! The sweep's cases, for a DISPATCHED or RUNNING task:
//! 1. no lease, and the dispatch was never accepted within its deadline: the
//!    dispatch was interrupted; give it back to the queue (it does not count
//!    as a run);
//! 2. the lease is held for the current attempt: the attempt is alive; if the
//!    acceptance was lost, record the task as RUNNING;
//! 3. no lease for a RUNNING task: the host is gone (or cut off and has
//!    stopped the trainer itself); requeue with attempt + 1, or fail the task
//!    for good after its maximum attempts.
//!
//! A missing lease is only evidence while Redis can be trusted to still hold
//! it: after Redis lost its data the sweep waits a full lease TTL and a
//! heartbeat, during which live hosts rebuild their leases with their next
//! renewals ([`leases_distrusted_until`]). The window is kept in Redis
//! itself (`trainyard:epoch_grace`, written with the new epoch), so a
//! master that restarts, or a standby that takes over, inside it waits it
//! out too.

use crate::model::{AttemptOutcome, Metrics, ResultView, StoredCheckpoint, TaskStatus};
use std::time::{Duration, Instant};
use trainyard_proto::messages::{AttemptReport, Checkpoint, Outcome};
use trainyard_proto::WorkerId;

/// What the master believes about a live task.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveTask {
    pub status: TaskStatus,
    pub attempt: u32,
    pub host: String,
    pub dispatch_deadline_ms: Option<i64>,
    pub cancel_requested: bool,
    /// Attempts started by a host, including the current one once RUNNING.
    pub runs: u32,
    pub max_attempts: u32,
}

/// The task's owner key as the sweep read it.
#[derive(Clone, Debug, PartialEq)]
pub enum Lease {
    Absent,
    Held {
        worker: WorkerId,
        attempt: u32,
    },
    /// The key holds something that is not a lease value.
    Unreadable(String),
}

/// What the task becomes after an attempt that did not succeed.
#[derive(Clone, Debug, PartialEq)]
pub enum AfterAttempt {
    Requeue,
    Fail(String),
    Cancel,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SweepDecision {
    Keep,
    /// The host holds the lease, so it accepted the dispatch.
    MarkRunning {
        slot: u32,
    },
    /// The attempt is over without a report; fence it off, then move on.
    GiveUp {
        outcome: AttemptOutcome,
        reason: String,
        then: AfterAttempt,
    },
}

/// The next step after an attempt that ended without success.
pub fn after_unsuccessful(task: &LiveTask, counts_as_run: bool, reason: &str) -> AfterAttempt {
    if task.cancel_requested {
        AfterAttempt::Cancel
    } else if counts_as_run && task.runs >= task.max_attempts {
        AfterAttempt::Fail(format!(
            "gave up after {} attempt{}; last: {reason}",
            task.runs,
            if task.runs == 1 { "" } else { "s" }
        ))
    } else {
        AfterAttempt::Requeue
    }
}

/// The sweep's decision for one live task.
///
/// `leases_trustworthy` is false while Redis may still be missing leases that
/// hosts are about to rebuild (after it lost its data). `host_connected`
/// says whether the task's host holds a connection: a connected host's
/// acceptance, which names the devices and share the attempt was given, is
/// on its way over it, so the lease alone does not start the attempt (the
/// assignment would be lost).
pub fn sweep(
    task: &LiveTask,
    lease: &Lease,
    now_ms: i64,
    leases_trustworthy: bool,
    host_connected: bool,
) -> SweepDecision {
    match lease {
        Lease::Held { worker, attempt }
            if *attempt == task.attempt && worker.host.as_str() == task.host =>
        {
            if task.status == TaskStatus::Dispatched && !host_connected {
                SweepDecision::MarkRunning { slot: worker.slot }
            } else {
                SweepDecision::Keep
            }
        }
        // Another attempt's lease: an older attempt not yet stopped (the
        // current one overwrites it when it starts), or a lease the current
        // attempt has not taken yet. Either way the current attempt's own
        // fate is still open.
        Lease::Held { .. } | Lease::Unreadable(_) => SweepDecision::Keep,
        Lease::Absent if !leases_trustworthy => SweepDecision::Keep,
        Lease::Absent => match task.status {
            TaskStatus::Dispatched => {
                let expired = task.dispatch_deadline_ms.is_none_or(|d| now_ms >= d);
                if !expired {
                    return SweepDecision::Keep;
                }
                let reason = format!(
                    "dispatch to host {} was not accepted in time and no lease was taken",
                    task.host
                );
                SweepDecision::GiveUp {
                    outcome: AttemptOutcome::Undelivered,
                    then: after_unsuccessful(task, false, &reason),
                    reason,
                }
            }
            TaskStatus::Running => {
                let reason = format!(
                    "lease of host {} lapsed: the host died, hung, or lost its connection",
                    task.host
                );
                SweepDecision::GiveUp {
                    outcome: AttemptOutcome::LeaseLost,
                    then: after_unsuccessful(task, true, &reason),
                    reason,
                }
            }
            _ => SweepDecision::Keep,
        },
    }
}

/// How the dataset's epoch, as just read, compares with the one this
/// master knew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochChange {
    /// The epoch this master knew, or the first it sees.
    Kept,
    /// No epoch: Redis lost its data (or this is its first use).
    Lost,
    /// Another epoch than the one this master knew: Redis lost its data
    /// and another master wrote the new epoch.
    Replaced,
}

/// Compares the epoch `seen` in Redis with the one this master `known`.
pub fn epoch_change(known: Option<&str>, seen: Option<&str>) -> EpochChange {
    match (known, seen) {
        (_, None) => EpochChange::Lost,
        (Some(known), Some(seen)) if known != seen => EpochChange::Replaced,
        _ => EpochChange::Kept,
    }
}

/// Until when a missing lease proves nothing, after reading the epoch at
/// `now`; `None`: from now on it does.
///
/// `before` is the master's own deadline so far. `grace_left` is what is
/// left of the window Redis keeps (`trainyard:epoch_grace`): written with a
/// new epoch by whichever master saw the loss first, it holds across master
/// restarts and failovers. A loss this master saw itself (`Lost`, or an
/// epoch `Replaced` by another master) also opens a window of `wait` from
/// now while tasks are `live`, in case the one in Redis could not be
/// written. With no live task no lease can have been lost: no window.
pub fn leases_distrusted_until(
    now: Instant,
    before: Option<Instant>,
    change: EpochChange,
    grace_left: Option<Duration>,
    live: bool,
    wait: Duration,
) -> Option<Instant> {
    let seen_here = match change {
        EpochChange::Kept => None,
        EpochChange::Lost | EpochChange::Replaced => live.then(|| now + wait),
    };
    [
        before.filter(|until| *until > now),
        grace_left.map(|left| now + left),
        seen_here,
    ]
    .into_iter()
    .flatten()
    .max()
}

/// Whether the sweep records now a report it found in Redis.
///
/// A connected host sends its report over the connection as well, after the
/// progress and checkpoints that came before it. Taking the Redis copy first
/// could end the attempt before those are handled, and requeue the task from
/// an older checkpoint. So the report of a connected host is left for the
/// connection to deliver. It is taken from Redis once sweeps have seen it
/// waiting there for `grace`, the hosts' report resend interval: a host that
/// holds the report sends it again within that time, so one still waiting
/// is not coming (a host restarted after storing it). `waited` is how long
/// it has been seen waiting, `None` the first time.
pub fn take_redis_report(
    host_connected: bool,
    waited: Option<std::time::Duration>,
    grace: std::time::Duration,
) -> bool {
    !host_connected || waited.is_some_and(|w| w >= grace)
}

/// What a report of the current attempt does to the task.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportDecision {
    pub outcome: AttemptOutcome,
    pub error: Option<String>,
    pub metrics: Option<Metrics>,
    pub then: Settle,
}

/// Where the task goes after a reported attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Settle {
    Complete {
        result: ResultView,
        checkpoint: Option<StoredCheckpoint>,
    },
    Fail(String),
    Cancel,
    Requeue,
}

impl From<AfterAttempt> for Settle {
    fn from(a: AfterAttempt) -> Self {
        match a {
            AfterAttempt::Requeue => Settle::Requeue,
            AfterAttempt::Fail(e) => Settle::Fail(e),
            AfterAttempt::Cancel => Settle::Cancel,
        }
    }
}

/// Decides what a report changes. The caller has checked that the report is
/// for the task's current attempt, from the host that runs it.
pub fn report(task: &LiveTask, report: &AttemptReport) -> ReportDecision {
    let attempt = report.attempt.attempt;
    match &report.outcome {
        Outcome::Completed {
            metrics,
            checkpoint,
            summary,
        } => {
            let metrics = crate::model::metrics_map(metrics);
            let checkpoint = checkpoint.clone().map(|checkpoint| StoredCheckpoint {
                attempt,
                checkpoint,
            });
            ReportDecision {
                outcome: AttemptOutcome::Completed,
                error: None,
                metrics: Some(metrics.clone()),
                then: Settle::Complete {
                    result: ResultView {
                        metrics,
                        summary: summary.clone(),
                        checkpoint: checkpoint.as_ref().map(StoredCheckpoint::view),
                    },
                    checkpoint,
                },
            }
        }
        Outcome::Failed {
            message,
            retryable: false,
        } => ReportDecision {
            outcome: AttemptOutcome::Failed,
            error: Some(message.clone()),
            metrics: None,
            then: if task.cancel_requested {
                Settle::Cancel
            } else {
                Settle::Fail(message.clone())
            },
        },
        Outcome::Failed {
            message,
            retryable: true,
        } => ReportDecision {
            outcome: AttemptOutcome::Failed,
            error: Some(message.clone()),
            metrics: None,
            then: after_unsuccessful(task, true, message).into(),
        },
        Outcome::HostFault { message } => ReportDecision {
            outcome: AttemptOutcome::HostFault,
            error: Some(message.clone()),
            metrics: None,
            then: after_unsuccessful(task, false, message).into(),
        },
        Outcome::LeaseLost { message } => ReportDecision {
            outcome: AttemptOutcome::LeaseLost,
            error: Some(message.clone()),
            metrics: None,
            then: after_unsuccessful(task, true, message).into(),
        },
        // Counted here; the scheduler frees a task's first stalls.
        Outcome::Stalled { message } => crate::stall::decision(task, message, true),
        Outcome::Cancelled => ReportDecision {
            outcome: AttemptOutcome::Cancelled,
            error: None,
            metrics: None,
            then: Settle::Cancel,
        },
    }
}

/// Whether an attempt that ended with `outcome` used one of its task's
/// attempts, once started. The host's own failures do not, nor an attempt
/// stopped because its host was drained: the task is requeued as if that
/// run had not happened.
pub fn uses_an_attempt(outcome: AttemptOutcome) -> bool {
    !matches!(outcome, AttemptOutcome::HostFault | AttemptOutcome::Drained)
}

/// The decision for a report of an attempt stopped because its host was
/// drained with `--now`: unless it completed (or was cancelled), the task
/// goes back to the queue without using an attempt.
pub fn drained(task: &LiveTask, decision: ReportDecision) -> ReportDecision {
    match decision.then {
        Settle::Complete { .. } | Settle::Cancel => decision,
        Settle::Fail(_) | Settle::Requeue => ReportDecision {
            outcome: AttemptOutcome::Drained,
            then: after_unsuccessful(task, false, "").into(),
            ..decision
        },
    }
}

/// The size of a checkpoint, for logs.
pub fn checkpoint_bytes(c: &Checkpoint) -> usize {
    match c {
        Checkpoint::File { data, .. } => data.len(),
        Checkpoint::External(r) => r.len(),
        Checkpoint::Stored { object, .. } => usize::try_from(object.size).unwrap_or(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::{AttemptRef, HostId};

    fn running(runs: u32) -> LiveTask {
        LiveTask {
            status: TaskStatus::Running,
            attempt: runs,
            host: "h1".into(),
            dispatch_deadline_ms: None,
            cancel_requested: false,
            runs,
            max_attempts: 3,
        }
    }

    fn held(host: &str, slot: u32, attempt: u32) -> Lease {
        Lease::Held {
            worker: HostId::new(host).unwrap().worker(slot),
            attempt,
        }
    }

    #[test]
    fn an_epoch_is_lost_when_gone_and_replaced_when_another_master_wrote_a_new_one() {
        assert_eq!(epoch_change(None, None), EpochChange::Lost);
        assert_eq!(epoch_change(Some("a"), None), EpochChange::Lost);
        assert_eq!(epoch_change(None, Some("a")), EpochChange::Kept);
        assert_eq!(epoch_change(Some("a"), Some("a")), EpochChange::Kept);
        assert_eq!(epoch_change(Some("a"), Some("b")), EpochChange::Replaced);
    }

    #[test]
    fn a_master_that_starts_inside_the_window_redis_keeps_trusts_no_missing_lease_until_it_ends() {
        let now = Instant::now();
        let wait = Duration::from_secs(130);
        let left = Duration::from_secs(100);
        // Restarted: the epoch is there, first seen, but its grace runs.
        assert_eq!(
            leases_distrusted_until(now, None, EpochChange::Kept, Some(left), true, wait),
            Some(now + left)
        );
        // No grace in Redis, nothing seen here: trusted.
        assert_eq!(
            leases_distrusted_until(now, None, EpochChange::Kept, None, true, wait),
            None
        );
        // The master's own window is kept until it ends.
        let later = now + Duration::from_secs(5);
        assert_eq!(
            leases_distrusted_until(later, Some(now + wait), EpochChange::Kept, None, true, wait),
            Some(now + wait)
        );
        assert_eq!(
            leases_distrusted_until(
                now + wait,
                Some(now + wait),
                EpochChange::Kept,
                None,
                true,
                wait
            ),
            None
        );
    }

    #[test]
    fn a_loss_seen_here_opens_a_window_only_while_tasks_are_live() {
        let now = Instant::now();
        let wait = Duration::from_secs(130);
        for change in [EpochChange::Lost, EpochChange::Replaced] {
            assert_eq!(
                leases_distrusted_until(now, None, change, None, true, wait),
                Some(now + wait),
                "{change:?}: even when Redis could not be given the window"
            );
            assert_eq!(
                leases_distrusted_until(now, None, change, None, false, wait),
                None,
                "{change:?}: no live task, no lease to lose"
            );
        }
        // The later end wins.
        let long = Duration::from_secs(200);
        assert_eq!(
            leases_distrusted_until(now, None, EpochChange::Lost, Some(long), true, wait),
            Some(now + long)
        );
    }

    #[test]
    fn a_redis_report_of_a_connected_host_waits_for_the_resend_interval() {
        let s = std::time::Duration::from_secs;
        assert!(
            take_redis_report(false, None, s(5)),
            "a gone host's report is taken at once"
        );
        assert!(
            !take_redis_report(true, None, s(5)),
            "the connection delivers it, after its progress"
        );
        assert!(
            !take_redis_report(true, Some(s(1)), s(5)),
            "a loaded machine may be slow to deliver it"
        );
        assert!(
            take_redis_report(true, Some(s(5)), s(5)),
            "still there after the host would have sent it again: taken"
        );
    }

    #[test]
    fn a_held_lease_keeps_the_task_running() {
        assert_eq!(
            sweep(&running(1), &held("h1", 0, 1), 0, true, false),
            SweepDecision::Keep
        );
    }

    #[test]
    fn a_lease_taken_before_a_gone_hosts_acceptance_arrived_marks_the_task_running() {
        let task = LiveTask {
            status: TaskStatus::Dispatched,
            attempt: 1,
            runs: 0,
            dispatch_deadline_ms: Some(1_000),
            ..running(0)
        };
        assert_eq!(
            sweep(&task, &held("h1", 2, 1), 0, true, false),
            SweepDecision::MarkRunning { slot: 2 }
        );
        assert_eq!(
            sweep(&task, &held("h1", 2, 1), 0, true, true),
            SweepDecision::Keep,
            "a connected host's acceptance, with its assignment, is on its way"
        );
    }

    #[test]
    fn an_interrupted_dispatch_is_requeued_only_after_its_deadline_and_is_not_a_run() {
        let task = LiveTask {
            status: TaskStatus::Dispatched,
            attempt: 3,
            runs: 3,
            dispatch_deadline_ms: Some(1_000),
            ..running(0)
        };
        assert_eq!(
            sweep(&task, &Lease::Absent, 999, true, false),
            SweepDecision::Keep
        );
        match sweep(&task, &Lease::Absent, 1_000, true, false) {
            SweepDecision::GiveUp { outcome, then, .. } => {
                assert_eq!(outcome, AttemptOutcome::Undelivered);
                // Three runs already, but an undelivered dispatch never fails a task.
                assert_eq!(then, AfterAttempt::Requeue);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lapsed_lease_requeues_until_the_attempts_run_out() {
        let SweepDecision::GiveUp { outcome, then, .. } =
            sweep(&running(1), &Lease::Absent, 0, true, false)
        else {
            panic!()
        };
        assert_eq!(
            (outcome, then),
            (AttemptOutcome::LeaseLost, AfterAttempt::Requeue)
        );
        let SweepDecision::GiveUp { then, .. } = sweep(&running(3), &Lease::Absent, 0, true, false)
        else {
            panic!()
        };
        assert!(
            matches!(then, AfterAttempt::Fail(ref m) if m.starts_with("gave up after 3 attempts"))
        );
    }

    #[test]
    fn a_missing_lease_proves_nothing_while_redis_is_rebuilding() {
        assert_eq!(
            sweep(&running(1), &Lease::Absent, 0, false, false),
            SweepDecision::Keep
        );
    }

    #[test]
    fn an_older_attempts_lease_does_not_decide_the_current_one() {
        assert_eq!(
            sweep(&running(2), &held("h9", 0, 1), 0, true, false),
            SweepDecision::Keep
        );
    }

    #[test]
    fn a_cancelled_task_whose_host_vanished_ends_cancelled() {
        let task = LiveTask {
            cancel_requested: true,
            ..running(1)
        };
        let SweepDecision::GiveUp { then, .. } = sweep(&task, &Lease::Absent, 0, true, false)
        else {
            panic!()
        };
        assert_eq!(then, AfterAttempt::Cancel);
    }

    fn report_of(outcome: Outcome) -> AttemptReport {
        AttemptReport {
            attempt: AttemptRef::new(1, 1),
            host: HostId::new("h1").unwrap(),
            slot: 0,
            outcome,
            assignment: Default::default(),
            duration_ms: 5,
            finished_at_ms: 0,
            progress: None,
        }
    }

    #[test]
    fn a_failure_that_will_never_succeed_fails_the_task_at_once() {
        let d = report(
            &running(1),
            &report_of(Outcome::Failed {
                message: "invalid params: \"episodes\" must be positive".into(),
                retryable: false,
            }),
        );
        assert_eq!(d.outcome, AttemptOutcome::Failed);
        assert_eq!(
            d.then,
            Settle::Fail("invalid params: \"episodes\" must be positive".into())
        );
    }

    #[test]
    fn a_retryable_failure_requeues_and_the_last_allowed_one_fails() {
        let failed = report_of(Outcome::Failed {
            message: "trainer exited with code 3".into(),
            retryable: true,
        });
        assert_eq!(report(&running(1), &failed).then, Settle::Requeue);
        assert!(matches!(report(&running(3), &failed).then, Settle::Fail(_)));
    }

    #[test]
    fn a_host_fault_requeues_without_using_an_attempt_even_on_the_last_one() {
        let fault = report_of(Outcome::HostFault {
            message: "cannot launch the trainer: Permission denied".into(),
        });
        for runs in [1, 3] {
            let d = report(&running(runs), &fault);
            assert_eq!(d.outcome, AttemptOutcome::HostFault);
            assert_eq!(d.then, Settle::Requeue, "after {runs} runs");
            assert!(d.error.unwrap().contains("Permission denied"));
        }
        assert!(!uses_an_attempt(AttemptOutcome::HostFault));
        assert!(uses_an_attempt(AttemptOutcome::Failed));
        assert!(!uses_an_attempt(AttemptOutcome::Drained));
        assert!(uses_an_attempt(AttemptOutcome::LeaseLost));
        let cancelled = LiveTask {
            cancel_requested: true,
            ..running(1)
        };
        assert_eq!(report(&cancelled, &fault).then, Settle::Cancel);
    }

    #[test]
    fn an_attempt_stopped_for_a_drain_is_requeued_without_using_an_attempt() {
        let stopped = report_of(Outcome::LeaseLost {
            message: "stopped by the master: its host was drained with --now".into(),
        });
        let d = drained(&running(3), report(&running(3), &stopped));
        assert_eq!(
            (d.outcome, d.then),
            (AttemptOutcome::Drained, Settle::Requeue)
        );
        let done = report_of(Outcome::Completed {
            metrics: vec![],
            checkpoint: None,
            summary: None,
        });
        let d = drained(&running(1), report(&running(1), &done));
        assert_eq!(d.outcome, AttemptOutcome::Completed, "it finished first");
    }

    #[test]
    fn a_completed_report_carries_its_metrics_and_checkpoint() {
        let d = report(
            &running(1),
            &report_of(Outcome::Completed {
                metrics: vec![trainyard_proto::messages::Metric {
                    name: "mean_return".into(),
                    value: 0.9,
                }],
                checkpoint: Some(Checkpoint::File {
                    name: "policy.json".into(),
                    data: vec![1, 2, 3],
                }),
                summary: Some("ok".into()),
            }),
        );
        let Settle::Complete { result, checkpoint } = d.then else {
            panic!()
        };
        assert_eq!(result.metrics.get("mean_return"), Some(&0.9));
        assert_eq!(result.checkpoint.unwrap().bytes, 3);
        assert_eq!(checkpoint.unwrap().attempt, 1);
    }
}
