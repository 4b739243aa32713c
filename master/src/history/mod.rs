//! Progress history: every progress point the master publishes is stored
//! in the database (`progress_points`), so a task's curves survive master
//! restarts and stay after it ends. `GET /v1/tasks/{id}/progress` reads
//! them back.
//!
//! The [`Recorder`] is one more subscriber of the task events, so the
//! scheduler's turn does not wait on it: it batches the points it hears
//! (at most [`BATCH`], at least every [`FLUSH_EVERY`]) into one transaction,
//! and thins a task's history when it passes the bound ([`bound`]). A
//! recorder that falls behind the event stream by more than its buffer
//! misses points, and logs how many.

pub mod bound;

use crate::events::{EventKind, Events, TaskEvent};
use crate::store::{NewPoint, Store};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError};
use trainyard_proto::TaskId;

/// Most points held before they are written.
pub const BATCH: usize = 1024;

/// Longest a heard point waits before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// Stores the progress points of the task events.
pub struct Recorder {
    store: Store,
    events: broadcast::Receiver<TaskEvent>,
    /// Points stored per task with a live attempt, to know when to thin;
    /// forgotten when the task ends.
    counts: HashMap<TaskId, usize>,
    buffer: Vec<NewPoint>,
    ended: Vec<TaskId>,
}

/// The point a progress event carries, if it is one.
pub fn point(event: &TaskEvent) -> Option<NewPoint> {
    if event.kind != EventKind::Progress {
        return None;
    }
    let p = event.progress.as_ref()?;
    Some(NewPoint {
        task: event.task,
        attempt: p.attempt,
        episode: p.episode,
        episode_return: p.episode_return,
        metrics: p.metrics.clone(),
        at_ms: p.at_ms,
    })
}

impl Recorder {
    /// Subscribes now: points published from here on are recorded.
    pub fn new(store: Store, events: &Events) -> Self {
        Self {
            store,
            events: events.subscribe(),
            counts: HashMap::new(),
            buffer: Vec::with_capacity(BATCH),
            ended: vec![],
        }
    }

    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                event = self.events.recv() => match event {
                    Ok(event) => self.hear(&event).await,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "progress history fell behind the event stream; events missed");
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = tick.tick() => self.flush().await,
            }
        }
        self.flush().await;
    }

    async fn hear(&mut self, event: &TaskEvent) {
        if let Some(p) = point(event) {
            self.buffer.push(p);
        } else if event.status.is_terminal() {
            self.ended.push(event.task);
        }
        if self.buffer.len() >= BATCH {
            self.flush().await;
        }
    }

    /// Writes the buffered points, then thins the tasks past the bound.
    async fn flush(&mut self) {
        if !self.buffer.is_empty() {
            let points = std::mem::take(&mut self.buffer);
            match self.store.insert_points(&points).await {
                Ok(()) => self.bound(&points).await,
                Err(e) => {
                    tracing::warn!(error = %e, count = points.len(), "progress points not stored")
                }
            }
        }
        for task in self.ended.drain(..) {
            self.counts.remove(&task);
        }
    }

    async fn bound(&mut self, points: &[NewPoint]) {
        let mut added: HashMap<TaskId, usize> = HashMap::new();
        for p in points {
            *added.entry(p.task).or_default() += 1;
        }
        // Tasks seen for the first time are counted in one statement.
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
