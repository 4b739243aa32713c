//! Progress history: every progress point the master hears is stored in
//! the database (`progress_points`), so a task's curves survive master
//! restarts and stay after it ends. `GET /v1/tasks/{id}/progress` reads
//! them back.
//!
//! The scheduler stores a turn's points in the turn's own transaction
//! ([`crate::store::Batch::points`], made by [`point`]), ahead of any report
//! handled in that turn: when a task is seen to end, every point heard
//! before its report is stored. The [`Thinner`] keeps each history within
//! its bound ([`bound`]): one more subscriber of the task events, which are
//! published once a turn has committed, it counts the points each task
//! gained and thins a task's history when it passes the bound, off the
//! scheduler's turn.

pub mod bound;

use crate::events::{EventKind, Events, TaskEvent};
use crate::model::ProgressView;
use crate::store::{NewPoint, Store};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError};
use trainyard_proto::TaskId;

/// Longest a counted point waits before the thinner checks its task.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);

/// The point to store for a progress of `task`.
pub fn point(task: TaskId, progress: &ProgressView) -> NewPoint {
    NewPoint {
        task,
        attempt: progress.attempt,
        episode: progress.episode,
        episode_return: progress.episode_return,
        metrics: progress.metrics.clone(),
        at_ms: progress.at_ms,
    }
}

/// Keeps each task's stored history within its bound.
pub struct Thinner {
    store: Store,
    events: broadcast::Receiver<TaskEvent>,
    /// Points stored per task with a live attempt, to know when to thin;
    /// forgotten when the task ends.
    counts: HashMap<TaskId, usize>,
    /// Points stored since the last check, per task.
    added: HashMap<TaskId, usize>,
    ended: Vec<TaskId>,
}

impl Thinner {
    /// Subscribes now: points stored from here on are counted.
    pub fn new(store: Store, events: &Events) -> Self {
        Self {
            store,
            events: events.subscribe(),
            counts: HashMap::new(),
            added: HashMap::new(),
            ended: vec![],
        }
    }

    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                event = self.events.recv() => match event {
                    Ok(event) => self.hear(&event),
                    Err(RecvError::Lagged(missed)) => {
                        // The points are stored all the same; only the
                        // counts are unsure: measure again from the store.
                        tracing::debug!(missed, "the history's thinner fell behind the event stream; counting again");
                        self.counts.clear();
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = tick.tick() => self.check().await,
            }
        }
    }

    fn hear(&mut self, event: &TaskEvent) {
        if event.kind == EventKind::Progress && event.progress.is_some() {
            *self.added.entry(event.task).or_default() += 1;
        } else if event.status.is_terminal() {
            self.ended.push(event.task);
        }
    }

    /// Thins the tasks that passed the bound since the last check.
    async fn check(&mut self) {
        let added = std::mem::take(&mut self.added);
        if !added.is_empty() {
            self.bound(added).await;
        }
        for task in self.ended.drain(..) {
            self.counts.remove(&task);
        }
    }

    async fn bound(&mut self, added: HashMap<TaskId, usize>) {
        // Tasks seen for the first time are counted in one statement; what
        // they just gained is stored already, so it is in that count.
        let unknown: Vec<TaskId> = added
            .keys()
            .filter(|t| !self.counts.contains_key(t))
            .copied()
            .collect();
        let stored = match self.store.point_counts(&unknown).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count progress points");
                return;
            }
        };
        for (task, n) in added {
            let count = match self.counts.get(&task) {
                Some(c) => c + n,
                None => stored.get(&task).copied().unwrap_or(n),
            };
            let count = if bound::over(count) {
                match self.store.thin_points(task).await {
                    Ok(kept) => kept,
                    Err(e) => {
                        tracing::warn!(task, error = %e, "cannot thin progress points");
                        count
                    }
                }
            } else {
                count
            };
            self.counts.insert(task, count);
        }
    }
}
