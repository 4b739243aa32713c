//! Recording how an attempt ended, from its report (over the connection or
//! picked up from Redis) or from the sweep's verdict. The report of the
//! task's current attempt, from the host that runs it, moves the task on;
//! any other is acknowledged and changes nothing.

use super::cycle::Cycle;
use super::queue::Queued;
use super::state::SessionId;
use super::tally::Counted;
use super::Scheduler;
use crate::events::TaskEvent;
use crate::model::{AttemptOutcome, Metrics, TaskStatus};
use crate::recovery::{self, Settle};
use crate::stall;
use crate::store::{Next, Write};
use trainyard_proto::messages::{AttemptReport, MasterMessage, Outcome};
use trainyard_proto::{AttemptRef, HostId, TaskId};

impl Scheduler {
    /// Handles a final report. `connection` is the host connection it came
    /// on, or `None` when the sweep found it in Redis.
    pub(super) fn report(
        &mut self,
        report: AttemptReport,
        connection: Option<(HostId, SessionId)>,
        cycle: &mut Cycle,
    ) {
        let attempt = report.attempt;
        // A reported attempt is over on its host: its share is free.
        if let Some(h) = self.state.hosts.get_mut(&report.host) {
            h.reported.remove(&attempt);
        }
        if let Some(live) = self.state.current(attempt, &report.host).cloned() {
            if live.status == TaskStatus::Dispatched {
                // It ran to the end before its acceptance was recorded.
                self.mark_running(attempt, report.slot, Some(report.assignment.clone()), cycle);
            }
            self.final_progress(&report, cycle);
            let live = self.state.live.get(&attempt.task).cloned().unwrap_or(live);
            let mut decision = recovery::report(&live.view(), &report);
            if let Outcome::Stalled { message } = &report.outcome {
                decision = stall::decision(&live.view(), message, self.stall_counts(attempt.task));
            }
            if live.drained {
                decision = recovery::drained(&live.view(), decision);
            }
            tracing::info!(
                %attempt,
                host = %report.host,
                outcome = decision.outcome.as_str(),
                from = if connection.is_some() { "connection" } else { "redis" },
                "attempt reported"
            );
            self.settle(
                attempt,
                decision.outcome,
                decision.error,
                decision.metrics,
                decision.then,
                cycle,
            );
        } else {
            cycle.count(Counted::StaleReport);
            tracing::debug!(%attempt, host = %report.host, "report of an attempt that is no longer current; acknowledged and ignored");
        }
        // The report stays in Redis until the turn commits; then it goes, and
        // the host may forget its copy.
        cycle.reports_done.push(attempt);
        let ack = MasterMessage::ReportAck { attempt };
        match connection {
            Some((host, session)) => cycle.send(&host, session, ack),
            None => {
                if let Some(h) = self.state.hosts.get(&report.host) {
                    cycle.send(&report.host, h.session, ack);
                }
            }
        }
    }

    /// Ends the current attempt `attempt` and moves the task on.
    pub(super) fn settle(
        &mut self,
        attempt: AttemptRef,
        outcome: AttemptOutcome,
        error: Option<String>,
        metrics: Option<Metrics>,
        then: Settle,
        cycle: &mut Cycle,
    ) {
        let Some(mut live) = self.state.release(attempt.task) else {
            return;
        };
        if outcome == AttemptOutcome::HostFault {
            self.host_faulted(attempt, &live.host, error.as_deref().unwrap_or_default());
        }
        let counted = self.counts_as_run(attempt.task, outcome);
        if !counted && live.status == TaskStatus::Running {
            live.runs = live.runs.saturating_sub(1);
        }
        let ran_for = live.started.map(|at| at.elapsed());
        self.attempt_ended(&live.host, attempt, outcome, error.as_deref(), ran_for);
        let (status, next) = match then {
            Settle::Complete { result, checkpoint } => (
                TaskStatus::Completed,
                Next::Completed { result, checkpoint },
            ),
            Settle::Fail(error) => (TaskStatus::Failed, Next::Failed { error }),
            Settle::Cancel => (TaskStatus::Cancelled, Next::Cancelled),
            Settle::Requeue => (TaskStatus::Pending, Next::Requeue),
        };
        let mut event = TaskEvent {
            metrics: metrics.clone(),
            ..self.event(attempt.task, status, attempt.attempt, Some(&live.host))
        };
        event.error = match &next {
            Next::Failed { error } => Some(error.clone()),
            _ => error.clone(),
        };
        cycle.events.push(event);
        cycle.count(Counted::Ended {
            adapter: live.route.adapter.clone(),
            status,
        });
        if outcome == AttemptOutcome::LeaseLost {
            cycle.count(Counted::LeaseLost);
        }
        cycle.write(Write::Finish {
            attempt,
            outcome,
            error,
            metrics,
            next,
            counted,
        });
        if status != TaskStatus::Pending {
            self.state.failed_on.remove(&attempt.task);
            self.state.stalled.remove(&attempt.task);
        } else {
            self.state.queue.push(Queued {
                id: attempt.task,
                route: live.route,
                need: live.need,
                priority: live.priority,
                attempt: live.attempt,
                runs: live.runs,
                max_attempts: live.max_attempts,
                since: std::time::Instant::now(),
                submitted: live.submitted,
            });
        }
    }

    /// Whether a stall of `task` now would use one of its attempts: not
    /// while it has had fewer than `master.free_stalled_retries` before.
    fn stall_counts(&self, task: TaskId) -> bool {
        let earlier = self.state.stalled.get(&task).copied().unwrap_or(0);
        stall::uses_an_attempt(earlier, self.config.free_stalled_retries)
    }

    /// Whether the attempt of `task` that ended with `outcome` used one of
    /// the task's attempts; a stall is counted among the task's stalls.
    fn counts_as_run(&mut self, task: TaskId, outcome: AttemptOutcome) -> bool {
        if outcome != AttemptOutcome::Stalled {
            return recovery::uses_an_attempt(outcome);
        }
        let counted = self.stall_counts(task);
        *self.state.stalled.entry(task).or_default() += 1;
        counted
    }
}
