//! Task events: every status change and progress update, fanned out to the
//! live event stream (`GET /v1/events`) through a broadcast channel. A slow
//! subscriber misses events (and is told so) rather than slowing the
//! scheduler.

use crate::model::{Metrics, ProgressView, TaskStatus};
use serde::Serialize;
use tokio::sync::broadcast;
use trainyard_proto::TaskId;

/// What happened to a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The task's status (or attempt, or host) changed.
    Status,
    /// The current attempt reported progress.
    Progress,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskEvent {
    pub task: TaskId,
    pub kind: EventKind,
    pub status: TaskStatus,
    pub attempt: u32,
    pub host: Option<String>,
    pub progress: Option<ProgressView>,
    pub metrics: Option<Metrics>,
    pub error: Option<String>,
    pub at_ms: i64,
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct Events {
    tx: broadcast::Sender<TaskEvent>,
}

impl Events {
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity);
        Self { tx }
    }

    pub fn publish(&self, event: TaskEvent) {
        // No subscriber is not an error.
        let _ = self.tx.send(event);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<TaskEvent> {
        self.tx.subscribe()
    }
}
