//! Committing a turn, and acting on it once committed.
//!
//! A turn's statements run in a transaction ([`Store::execute`]) whose
//! commit then runs in a task of its own while the scheduler goes on with
//! the next turn: taking commands and planning need not wait for the
//! database to make the previous turn durable. When the commit ends, the
//! turn *lands*: dispatches go out, submitters get their ids, reports are
//! acknowledged, events are published — nothing leaves the master that the
//! database does not hold.
//!
//! On PostgreSQL the next turn's statements also run while the previous
//! turn commits, on another connection. Two transactions are open at most,
//! and the older one has run all its statements: a row it changed stays
//! locked until it commits, so a later write to that row waits for it and
//! then sees its effect, and no deadlock can form. A turn with a write that
//! only the older turn's changes could make apply (`rests_on`) waits for
//! the older turn to land instead. The later turn commits
//! only after the earlier committed; after a failed one it is rolled back
//! and the state reloaded. SQLite has one writer: there the previous turn
//! lands before the next one's statements run.
//!
//! Turns land in order, so a host hears a turn's messages before the next
//! turn's.
//!
//! [`Store::execute`]: crate::store::Store::execute

use super::cycle::{Cycle, WriteKind};
use super::{queue, tally, Scheduler, SubmitError, SweepCreated};
use crate::model::TaskStatus;
use crate::placement;
use crate::store::{Backend, Batch, BatchResult, Executed, Next, StoreError, Write};
use std::collections::HashSet;
use std::time::Instant;
use tokio::task::JoinHandle;
use trainyard_proto::messages::MasterMessage;
use trainyard_proto::{now_ms, TaskId};

/// How a turn's transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Commit {
    Done,
    Failed,
    /// Refused: another master's term has begun (see `store::leadership`).
    Deposed,
}

impl Commit {
    fn failed(error: &StoreError) -> Self {
        if matches!(error, StoreError::Deposed { .. }) {
            Commit::Deposed
        } else {
            Commit::Failed
        }
    }
}

/// Whether a message of the turn goes out after its commit. After a failed
/// commit the state is reloaded, and every message still goes out but a
/// report's acknowledgement: the host keeps the report and sends it again.
/// A deposed master sends nothing: its hosts are the new leader's.
fn goes_out(message: &MasterMessage, commit: Commit) -> bool {
    match commit {
        Commit::Done => true,
        Commit::Failed => !matches!(message, MasterMessage::ReportAck { .. }),
        Commit::Deposed => false,
    }
}

/// Whether a turn's statements may run while the previous turn commits:
/// only where two write transactions can be open at once.
fn overlaps(backend: Backend) -> bool {
    backend == Backend::Postgres
}

/// Whether some of `later`'s writes could apply only to what `earlier`
/// wrote: writes to a task `earlier` dispatched (its attempt and attempt row
/// are new) or requeued (it is PENDING again). An update on PostgreSQL
/// judges a row by its last committed version, and waits for an
/// uncommitted change only to a row that version matches; such a write
/// would find the task as it was before `earlier` and not apply. Every
/// other write matches the row as it was before `earlier` exactly when it
/// matches it after, so it may run while `earlier` commits.
fn rests_on(later: &[Write], earlier: &[Write]) -> bool {
    let changed: HashSet<TaskId> = earlier
        .iter()
        .filter(|w| {
            matches!(
                w,
                Write::Dispatch { .. }
                    | Write::Finish {
                        next: Next::Requeue,
                        ..
                    }
            )
        })
        .map(Write::task)
        .collect();
    !changed.is_empty() && later.iter().any(|w| changed.contains(&w.task()))
}

/// How a turn's transaction ended: what it did, or how it failed and why.
pub(super) type Outcome = Result<BatchResult, (Commit, String)>;

fn outcome(result: crate::store::Result<BatchResult>) -> Outcome {
    result.map_err(|e| (Commit::failed(&e), e.to_string()))
}

/// A turn's effects and the batch of writes they rest on.
pub(super) struct Turn {
    cycle: Cycle,
    batch: Batch,
    /// Aligned with `batch.writes`.
    kinds: Vec<WriteKind>,
    /// Where the decision-order writes start (dispatch indexes count from it).
    offset: usize,
}

impl Turn {
    fn new(mut cycle: Cycle) -> Turn {
        let (writes, kinds, offset) = cycle.take_writes();
        let batch = Batch {
            inserts: std::mem::take(&mut cycle.inserts),
            sweeps: std::mem::take(&mut cycle.sweeps),
            writes,
            now_ms: now_ms(),
            points: std::mem::take(&mut cycle.points),
        };
        Turn {
            cycle,
            batch,
            kinds,
            offset,
        }
    }
}

/// A turn whose statements ran and whose commit runs in its own task.
pub(super) struct InFlight {
    turn: Turn,
    commit: JoinHandle<crate::store::Result<BatchResult>>,
}

impl InFlight {
    fn spawn(turn: Turn, executed: Executed) -> InFlight {
        InFlight {
            turn,
            commit: tokio::spawn(executed.commit()),
        }
    }

    /// Waits for the commit to end; may be called again after being
    /// cancelled.
    async fn committed(&mut self) -> Outcome {
        match (&mut self.commit).await {
            Ok(result) => outcome(result),
            Err(e) => Err((Commit::Failed, format!("the commit's task ended: {e}"))),
        }
    }
}

/// The commit of the turn in flight, if any; never ends when there is none.
pub(super) async fn landing(in_flight: &mut Option<InFlight>) -> Outcome {
    match in_flight {
        Some(f) => f.committed().await,
        None => std::future::pending().await,
    }
}

impl Scheduler {
    /// Commits the turn's writes, and acts on them once committed. Returns
    /// with the commit still running (see the module's documentation).
    pub(super) async fn commit(&mut self, cycle: Cycle) {
        if !cycle.has_writes() {
            // Nothing to wait for but the turn before.
            self.land().await;
            self.act(cycle, Commit::Done);
            return;
        }
        let turn = Turn::new(cycle);
        let waits = self
            .in_flight
            .as_ref()
            .is_some_and(|f| rests_on(&turn.batch.writes, &f.turn.batch.writes));
        if waits || !overlaps(self.store.backend()) {
            self.land().await;
        }
        let (before, executed) = self.execute(&turn).await;
        match (before, executed) {
            (Commit::Done, Ok(executed)) => self.in_flight = Some(InFlight::spawn(turn, executed)),
            (Commit::Done, Err(e)) => {
                self.land_turn(turn, outcome(Err(e)));
            }
            // Planned on what the failed turn did: rolled back.
            (failed, executed) => {
                if let Ok(executed) = executed {
                    if let Err(e) = executed.rollback().await {
                        tracing::warn!(error = %e, "could not roll back the turn after a failed one");
                    }
                }
                let why = "the turn before it failed to commit".to_string();
                self.land_turn(turn, Err((failed, why)));
            }
        }
    }

    /// Runs the turn's statements; a turn still in flight commits meanwhile
    /// and lands as soon as it has. Returns how the turn before ended
    /// (`Done` when none was in flight) and the statements' outcome.
    async fn execute(&mut self, turn: &Turn) -> (Commit, crate::store::Result<Executed>) {
        let store = self.store.clone();
        let executing = store.execute(&turn.batch);
        tokio::pin!(executing);
        let Some(mut previous) = self.in_flight.take() else {
            return (Commit::Done, executing.await);
        };
        let mut executed = None;
        let committed = tokio::select! {
            o = previous.committed() => o,
            e = &mut executing => {
                executed = Some(e);
                previous.committed().await
            }
        };
        let before = self.land_turn(previous.turn, committed);
        let executed = match executed {
            Some(e) => e,
            None => executing.await,
        };
        (before, executed)
    }

    /// Waits for the turn in flight, if any, and lands it.
    pub(super) async fn land(&mut self) {
        if self.in_flight.is_some() {
            let committed = landing(&mut self.in_flight).await;
            self.landed(committed);
        }
    }

    /// Lands the turn in flight, whose commit ended as `committed`.
    pub(super) fn landed(&mut self, committed: Outcome) {
        if let Some(f) = self.in_flight.take() {
            self.land_turn(f.turn, committed);
        }
    }

    /// Acts on a turn whose commit ended; returns how it ended.
    fn land_turn(&mut self, mut turn: Turn, committed: Outcome) -> Commit {
        let commit = match committed {
            Ok(result) => self.record(&mut turn, result),
            Err((commit, error)) => {
                tracing::error!(%error, "task store write failed; reloading state");
                self.fail_submits(&mut turn.cycle, &error);
                commit
            }
        };
        self.act(turn.cycle, commit);
        commit
    }

    /// Sends the turn's messages, answers its waiters and publishes its
    /// events, as far as `commit` allows.
    fn act(&mut self, mut cycle: Cycle, commit: Commit) {
        let committed = commit == Commit::Done;
        for (host, session, message) in cycle.messages.drain(..) {
            if goes_out(&message, commit) {
                self.deliver(&host, session, message);
            }
        }
        if committed {
            for counted in cycle.counted.drain(..) {
                self.finished.record(&counted);
                self.tally.record(counted);
            }
            if !cycle.reports_done.is_empty() {
                // Off the turn: the next turn need not wait for Redis, and a
                // report left behind is removed by a later sweep.
                let (redis, keys) = (self.redis.clone(), self.keys.clone());
                let done = std::mem::take(&mut cycle.reports_done);
                tokio::spawn(async move { super::forget_reports(&redis, &keys, &done, &[]).await });
            }
            for event in cycle.events.drain(..) {
                self.events.publish(event);
            }
        } else {
            self.resync = true;
        }
        for reply in cycle.replies.drain(..) {
            reply(committed);
        }
    }

    /// Takes in what a committed batch did: new tasks join the queue and
    /// their submitters get their ids; applied dispatches go out.
    fn record(&mut self, turn: &mut Turn, result: BatchResult) -> Commit {
        let (batch, cycle) = (&turn.batch, &mut turn.cycle);
        for (i, applied) in result.applied.iter().enumerate() {
            if !applied && turn.kinds[i] == WriteKind::Required {
                tracing::error!(write = ?batch.writes[i], "a write did not apply: the in-memory state disagrees with the database; reloading");
                self.resync = true;
            }
        }
        self.queue_submitted(cycle, batch, &result);
        // Tests crash here: the dispatch is recorded, the host never hears of it.
        if !cycle.dispatches.is_empty()
            && crate::failpoints::hit("master-crash-after-dispatch-commit")
        {
            tracing::error!("fail point: crashing after committing a dispatch");
            std::process::exit(86)
        }
        self.send_dispatches(cycle, turn.offset, result);
        Commit::Done
    }

    /// Gives each submitter its ids, in order, and queues the new tasks.
    fn queue_submitted(&mut self, cycle: &mut Cycle, batch: &Batch, result: &BatchResult) {
        let mut ids = result.inserted.iter().copied();
        let mut sweep_ids = result.sweeps.iter().copied();
        let mut inserted = batch.inserts.iter();
        for submit in cycle.submits.drain(..) {
            let mine: Vec<TaskId> = ids.by_ref().take(submit.count).collect();
            for id in &mine {
                if let Some(task) = inserted.next() {
                    cycle.counted.push(tally::Counted::Submitted {
                        adapter: task.adapter.clone(),
                    });
                    self.state.queue.push(queue::Queued {
                        id: *id,
                        route: placement::Route::new(task.adapter.clone(), task.kind.clone())
                            .pinned(task.version.clone()),
                        need: placement::Need::of(&task.resources),
                        priority: task.priority,
                        attempt: 0,
                        runs: 0,
                        max_attempts: task.max_attempts,
                        since: Instant::now(),
                        submitted: Some(Instant::now()),
                    });
                    self.queued_unplanned = true;
                    cycle
                        .events
                        .push(self.event(*id, TaskStatus::Pending, 0, None));
                }
            }
            match submit.reply {
                super::cycle::SubmitReply::Tasks(reply) => {
                    let _ = reply.send(Ok(mine));
                }
                super::cycle::SubmitReply::Sweep(reply) => {
                    let created = sweep_ids.next().map(|id| SweepCreated { id, tasks: mine });
                    let _ = reply.send(created.ok_or_else(|| {
                        SubmitError::Unavailable("the sweep was not recorded".into())
                    }));
                }
            }
        }
    }

    /// Sends the dispatches whose write applied, with what their statement
    /// returned.
    fn send_dispatches(&mut self, cycle: &mut Cycle, offset: usize, result: BatchResult) {
        let mut by_id: std::collections::HashMap<TaskId, crate::store::DispatchPayload> =
            result.payloads.into_iter().map(|p| (p.id, p)).collect();
        for d in std::mem::take(&mut cycle.dispatches) {
            if !result
                .applied
                .get(offset + d.write)
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            let Some(payload) = by_id.remove(&d.attempt.task) else {
                tracing::error!(attempt = %d.attempt, "dispatched task has no payload");
                self.resync = true;
                continue;
            };
            let checkpoint = payload.checkpoint.map(|c| c.checkpoint);
            let message = MasterMessage::Dispatch(trainyard_proto::messages::Dispatch {
                attempt: d.attempt,
                adapter: payload.adapter,
                version: d.version,
                kind: payload.kind,
                params: payload.params,
                checkpoint,
                timeout_secs: payload.timeout_secs,
                progress_timeout_secs: payload.progress_timeout_secs,
                resources: payload.resources,
            });
            self.deliver(&d.host, d.session, message);
        }
    }

    fn fail_submits(&mut self, cycle: &mut Cycle, error: &str) {
        for submit in cycle.submits.drain(..) {
            submit
                .reply
                .fail(SubmitError::Unavailable(error.to_string()));
        }
        cycle.sweeps.clear();
        cycle.dispatches.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::AttemptRef;

    #[test]
    fn a_deposed_master_sends_nothing_and_a_failed_commit_acknowledges_no_report() {
        let ack = MasterMessage::ReportAck {
            attempt: AttemptRef::new(7, 1),
        };
        let cancel = MasterMessage::Cancel {
            attempt: AttemptRef::new(7, 1),
        };
        let sent = |commit| (goes_out(&ack, commit), goes_out(&cancel, commit));
        assert_eq!(sent(Commit::Done), (true, true));
        assert_eq!(sent(Commit::Failed), (false, true));
        assert_eq!(sent(Commit::Deposed), (false, false));
    }

    fn dispatch(task: TaskId, attempt: u32) -> Write {
        Write::Dispatch {
            task,
            from_attempt: attempt - 1,
            attempt,
            host: "h".into(),
            deadline_ms: 0,
            version: None,
        }
    }

    fn finish(task: TaskId, next: Next) -> Write {
        Write::Finish {
            attempt: AttemptRef::new(task, 1),
            outcome: crate::model::AttemptOutcome::LeaseLost,
            error: None,
            metrics: None,
            next,
            counted: true,
        }
    }

    fn start(task: TaskId) -> Write {
        Write::Start {
            attempt: AttemptRef::new(task, 1),
            slot: 0,
            assignment: None,
        }
    }

    #[test]
    fn a_turn_waits_for_the_one_before_only_where_it_writes_a_task_that_turn_dispatched_or_requeued(
    ) {
        // The usual case: started in one turn, finished in the next.
        assert!(!rests_on(
            &[finish(1, Next::Cancelled), dispatch(9, 1)],
            &[start(1), dispatch(2, 1)]
        ));
        // Dispatched in one turn: the attempt and its row are new.
        assert!(rests_on(
            &[dispatch(7, 1), finish(2, Next::Requeue)],
            &[dispatch(2, 1)]
        ));
        assert!(rests_on(&[start(2)], &[start(1), dispatch(2, 1)]));
        // Requeued in one turn, dispatched again in the next.
        assert!(rests_on(&[dispatch(3, 2)], &[finish(3, Next::Requeue)]));
        // Ended for good: nothing later applies either way.
        let failed = Next::Failed { error: "x".into() };
        assert!(!rests_on(&[dispatch(3, 2)], &[finish(3, failed)]));
        assert!(!rests_on(&[], &[dispatch(1, 1)]));
    }

    #[test]
    fn only_postgresql_runs_a_turn_while_the_one_before_commits() {
        assert!(overlaps(Backend::Postgres));
        assert!(!overlaps(Backend::Sqlite));
    }
}
