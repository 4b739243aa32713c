//! One turn of the scheduler loop: everything decided in it, carried out
//! together. Writes go to the database in one transaction; only after it
//! commits are dispatches sent, submitters answered, reports acknowledged
//! and events published — so nothing leaves the master that the database
//! does not already hold.

use super::state::SessionId;
use super::tally::Counted;
use super::SubmitError;
use crate::events::TaskEvent;
use crate::model::{NewTask, ProgressView, StoredCheckpoint};
use crate::store::{NewPoint, Write};
use std::collections::HashMap;
use tokio::sync::oneshot;
use trainyard_proto::messages::MasterMessage;
use trainyard_proto::{AttemptRef, HostId, TaskId};

/// A dispatch decided this turn, sent once its write has committed.
pub struct PlannedDispatch {
    pub write: usize,
    pub host: HostId,
    pub session: SessionId,
    pub attempt: AttemptRef,
    /// The exact adapter version the host is told to run.
    pub version: String,
}

/// Submissions waiting for their ids.
pub struct PendingSubmit {
    pub count: usize,
    pub reply: SubmitReply,
}

/// Who waits for a submission's ids: a submitter of tasks, or of a sweep
/// (whose tasks are its trials).
pub enum SubmitReply {
    Tasks(oneshot::Sender<Result<Vec<TaskId>, SubmitError>>),
    Sweep(oneshot::Sender<Result<super::SweepCreated, SubmitError>>),
}

impl SubmitReply {
    pub fn fail(self, error: SubmitError) {
        match self {
            SubmitReply::Tasks(reply) => {
                let _ = reply.send(Err(error));
            }
            SubmitReply::Sweep(reply) => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// Writes whose failure to apply means the in-memory picture is wrong.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Must apply; if it does not, the scheduler reloads from the database.
    Required,
    /// Best effort: progress of an attempt that may have just ended, or an
    /// assignment that may be recorded already.
    BestEffort,
}

#[derive(Default)]
pub struct Cycle {
    pub inserts: Vec<NewTask>,
    /// Sweeps created this turn, each with its trials among `inserts`.
    pub sweeps: Vec<crate::store::SweepInsert>,
    pub submits: Vec<PendingSubmit>,
    writes: Vec<(Write, WriteKind)>,
    /// Latest progress per task this turn; becomes writes at commit, first in
    /// the batch, so that a report handled later in the same turn does not
    /// make them stale.
    pub progress: HashMap<TaskId, (AttemptRef, ProgressView, Option<StoredCheckpoint>)>,
    /// Every progress point heard this turn, in order: stored with the
    /// turn's writes, so a report ending a task commits with (never before)
    /// the points that came ahead of it.
    pub points: Vec<NewPoint>,
    pub dispatches: Vec<PlannedDispatch>,
    /// Messages to hosts, sent after the commit (dispatches excepted).
    pub messages: Vec<(HostId, SessionId, MasterMessage)>,
    /// Reports recorded this turn, removed from Redis after the commit.
    pub reports_done: Vec<AttemptRef>,
    pub events: Vec<TaskEvent>,
    /// What `/metrics` counts once the turn has committed.
    pub counted: Vec<Counted>,
    pub replies: Vec<Box<dyn FnOnce(bool) + Send + Sync>>,
}

impl Cycle {
    pub fn write(&mut self, write: Write) -> usize {
        self.writes.push((write, WriteKind::Required));
        self.writes.len() - 1
    }

    /// A write that may find nothing to change without anything being wrong.
    pub fn write_best_effort(&mut self, write: Write) {
        self.writes.push((write, WriteKind::BestEffort));
    }

    pub fn has_writes(&self) -> bool {
        !self.writes.is_empty()
            || !self.inserts.is_empty()
            || !self.progress.is_empty()
            || !self.points.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        !self.has_writes()
            && self.messages.is_empty()
            && self.reports_done.is_empty()
            && self.events.is_empty()
            && self.replies.is_empty()
    }

    /// Records the latest progress of an attempt, keeping the newest
    /// checkpoint even if a later update in the same turn carries none.
    pub fn progress(
        &mut self,
        attempt: AttemptRef,
        view: ProgressView,
        checkpoint: Option<StoredCheckpoint>,
    ) {
        let entry = self
            .progress
            .entry(attempt.task)
            .or_insert((attempt, view.clone(), None));
        if entry.0 != attempt {
            *entry = (attempt, view, checkpoint);
            return;
        }
        entry.1 = view;
        if checkpoint.is_some() {
            entry.2 = checkpoint;
        }
    }

    /// The checkpoint this turn will store for `task`, if any: the next
    /// attempt must get it even though it is not committed yet.
    pub fn checkpoint_for(&self, task: TaskId) -> Option<&StoredCheckpoint> {
        self.progress.get(&task).and_then(|(_, _, c)| c.as_ref())
    }

    /// Counts `counted` if the turn commits.
    pub fn count(&mut self, counted: Counted) {
        self.counted.push(counted);
    }

    pub fn send(&mut self, host: &HostId, session: SessionId, message: MasterMessage) {
        self.messages.push((host.clone(), session, message));
    }

    /// Runs `reply` after the commit with whether it succeeded.
    pub fn on_commit(&mut self, reply: impl FnOnce(bool) + Send + Sync + 'static) {
        self.replies.push(Box::new(reply));
    }

    /// The batch's writes: progress first, then the rest in decision order.
    /// Returns the kinds, aligned with the writes, and the offset of the
    /// decision-order writes (dispatch indexes are relative to it).
    pub fn take_writes(&mut self) -> (Vec<Write>, Vec<WriteKind>, usize) {
        let mut writes = Vec::with_capacity(self.progress.len() + self.writes.len());
        let mut kinds = Vec::with_capacity(writes.capacity());
        for (_, (attempt, progress, checkpoint)) in self.progress.drain() {
            writes.push(Write::Progress {
                attempt,
                progress,
                checkpoint,
            });
            kinds.push(WriteKind::BestEffort);
        }
        let offset = writes.len();
        for (w, k) in self.writes.drain(..) {
            writes.push(w);
            kinds.push(k);
        }
        (writes, kinds, offset)
    }
}
