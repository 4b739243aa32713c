//! The master's plain data: tasks, attempts and hosts as the store keeps them
//! and the API shows them. No I/O here.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use trainyard_proto::adapter_version::VersionPin;
use trainyard_proto::messages::{Checkpoint, Metric, Progress};
use trainyard_proto::resources::{Assignment, HostCapacity, ResourceRequest};
use trainyard_proto::TaskId;

/// Where a task is in its life.
///
/// ```text
/// PENDING ──dispatch──> DISPATCHED ──host accepts──> RUNNING ──report──> COMPLETED
///    ^                      │                          │  │              FAILED
///    └────── requeue ───────┴──── lease lapsed ────────┘  └──cancel───> CANCELLED
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    /// Waiting in the queue.
    Pending,
    /// Recorded as sent to a host, not yet accepted by it.
    Dispatched,
    /// A host holds its lease and runs it.
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        Self::Pending,
        Self::Dispatched,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Dispatched => "DISPATCHED",
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
    }

    /// The statuses a task never leaves.
    pub const TERMINAL: [TaskStatus; 3] = [Self::Completed, Self::Failed, Self::Cancelled];

    /// A terminal task never changes again.
    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// A live task has an attempt out on a host (or on its way to one).
    pub fn is_live(self) -> bool {
        matches!(self, Self::Dispatched | Self::Running)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttemptOutcome {
    Completed,
    Failed,
    Cancelled,
    /// The host lost the lease (it died, hung, or was cut off).
    LeaseLost,
    /// The dispatch never reached the host, or the host never took the lease.
    Undelivered,
    /// The host refused the dispatch.
    Rejected,
    /// The host could not start or contain the trainer for reasons of its
    /// own: the task was requeued without using an attempt.
    HostFault,
    /// Its host was drained with `--now` and stopped it: the task was
    /// requeued without using an attempt.
    Drained,
    /// Its trainer reported no progress for the task's progress timeout
    /// and its host stopped it: requeued from the last checkpoint, the
    /// task's first stalls without using an attempt
    /// (`master.free_stalled_retries`).
    Stalled,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
            Self::LeaseLost => "LEASE_LOST",
            Self::Undelivered => "UNDELIVERED",
            Self::Rejected => "REJECTED",
            Self::HostFault => "HOST_FAULT",
            Self::Drained => "DRAINED",
            Self::Stalled => "STALLED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Completed,
            Self::Failed,
            Self::Cancelled,
            Self::LeaseLost,
            Self::Undelivered,
            Self::Rejected,
            Self::HostFault,
            Self::Drained,
            Self::Stalled,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// A task as submitted, after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTask {
    pub name: Option<String>,
    pub adapter: String,
    /// The versions of the adapter it may run on; `None`: any.
    pub version: Option<VersionPin>,
    pub kind: String,
    /// A JSON object, as text.
    pub params: String,
    /// Higher runs first; FIFO within a priority.
    pub priority: i32,
    /// Started attempts allowed before the task fails for good.
    pub max_attempts: u32,
    /// Wall-clock limit of each attempt's trainer.
    pub timeout_secs: Option<u64>,
    /// How long each attempt's trainer may go without progress before its
    /// host ends the attempt as stalled.
    pub progress_timeout_secs: Option<u64>,
    /// CPUs, memory and GPUs it needs on one host.
    pub resources: ResourceRequest,
    /// The team it belongs to ([`crate::access`]): who sees and cancels it.
    pub team: String,
}

fn default_team() -> String {
    crate::access::DEFAULT_TEAM.to_string()
}

/// Figures by name, as the API shows them.
pub type Metrics = BTreeMap<String, f64>;

pub fn metrics_map(metrics: &[Metric]) -> Metrics {
    metrics.iter().map(|m| (m.name.clone(), m.value)).collect()
}

/// The latest progress of a task's current attempt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressView {
    pub attempt: u32,
    pub episode: Option<u64>,
    pub total_episodes: Option<u64>,
    pub episode_return: Option<f64>,
    pub metrics: Metrics,
    pub message: Option<String>,
    pub at_ms: i64,
}

impl ProgressView {
    pub fn from_progress(attempt: u32, p: &Progress, at_ms: i64) -> Self {
        Self {
            attempt,
            episode: p.episode,
            total_episodes: p.total_episodes,
            episode_return: p.episode_return,
            metrics: metrics_map(&p.metrics),
            message: p.message.clone(),
            at_ms,
        }
    }

    /// Whether this is the event `p` (received at any time): the same
    /// episode, return, metrics and message.
    pub fn shows(&self, p: &Progress) -> bool {
        self.episode == p.episode
            && self.total_episodes == p.total_episodes
            && self.episode_return == p.episode_return
            && self.message == p.message
            && self.metrics == metrics_map(&p.metrics)
    }
}

/// A checkpoint kept for a task, without its bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointView {
    /// `file` (bytes kept by the master, or in the artifact store when
    /// `sha256` is given) or `external` (a reference).
    pub kind: String,
    /// The file's workspace path, or the external reference.
    pub name: String,
    pub bytes: u64,
    /// Lower-case hex SHA-256 of a file kept in the artifact store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The attempt that wrote it.
    pub attempt: u32,
}

/// A checkpoint with its bytes, as stored and as handed to the next attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredCheckpoint {
    pub attempt: u32,
    pub checkpoint: Checkpoint,
}

impl StoredCheckpoint {
    pub fn view(&self) -> CheckpointView {
        match &self.checkpoint {
            Checkpoint::File { name, data } => CheckpointView {
                kind: "file".into(),
                name: name.clone(),
                bytes: data.len() as u64,
                sha256: None,
                attempt: self.attempt,
            },
            Checkpoint::External(reference) => CheckpointView {
                kind: "external".into(),
                name: reference.clone(),
                bytes: 0,
                sha256: None,
                attempt: self.attempt,
            },
            Checkpoint::Stored { name, object } => CheckpointView {
                kind: "file".into(),
                name: name.clone(),
                bytes: object.size,
                sha256: Some(object.sha256.clone()),
                attempt: self.attempt,
            },
        }
    }
}

/// A completed task's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultView {
    pub metrics: Metrics,
    pub summary: Option<String>,
    pub checkpoint: Option<CheckpointView>,
}

/// A task as the store keeps it and the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    /// The team it belongs to: only that team's principals (and fleet-wide
    /// roles) see it.
    #[serde(default = "default_team")]
    pub team: String,
    pub name: Option<String>,
    pub adapter: String,
    /// The versions of the adapter it may run on, as submitted
    /// (`name@requirement`); absent when any will do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_version: Option<VersionPin>,
    pub kind: String,
    /// The parameters as submitted (a JSON object).
    pub params: serde_json::Value,
    pub priority: i32,
    pub status: TaskStatus,
    /// The current (latest dispatched) attempt; 0 before the first dispatch.
    pub attempt: u32,
    /// How many attempts were started by a host.
    pub runs: u32,
    pub max_attempts: u32,
    pub timeout_secs: Option<u64>,
    /// No progress for this long ends an attempt as stalled (`None`: the
    /// adapter's default on the host, if any).
    #[serde(default)]
    pub progress_timeout_secs: Option<u64>,
    /// CPUs, memory and GPUs it needs on one host.
    #[serde(default)]
    pub resources: ResourceRequest,
    /// The host of the current attempt, while live (and after, for history).
    pub host: Option<String>,
    pub slot: Option<u32>,
    pub cancel_requested: bool,
    /// While DISPATCHED: when the sweep takes the dispatch back.
    pub dispatch_deadline_ms: Option<i64>,
    pub progress: Option<ProgressView>,
    pub checkpoint: Option<CheckpointView>,
    pub result: Option<ResultView>,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
}

/// One attempt of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: u32,
    pub host: String,
    /// The exact version of the adapter its host ran it with.
    #[serde(default)]
    pub adapter_version: Option<String>,
    pub slot: Option<u32>,
    pub dispatched_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub outcome: Option<AttemptOutcome>,
    pub error: Option<String>,
    pub metrics: Option<Metrics>,
    /// The devices and share its host gave it, once the host accepted it.
    #[serde(default)]
    pub assignment: Option<Assignment>,
}

/// A task with its attempts: what `GET /v1/tasks/{id}` returns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: Task,
    pub attempts: Vec<Attempt>,
    /// While PENDING: why no host has taken it yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// While RUNNING: how long since its trainer last reported progress
    /// (or started), as the master heard it ([`crate::stall`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_for_ms: Option<u64>,
}

/// A host the master has seen, as persisted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    pub id: String,
    pub slots: u32,
    /// What it offers; `None` for a host recorded before hosts declared it.
    pub capacity: Option<HostCapacity>,
    pub adapters: Vec<trainyard_proto::messages::AdapterInfo>,
    pub agent: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    /// Whether it takes new work (not written by [`crate::store::Store::upsert_host`]).
    pub standing: HostStanding,
}

/// Whether a host takes new work, as operators and the quarantine left
/// it; kept in the database, so it outlives the master that decided it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStanding {
    /// When an operator drained it (`trainyard hosts drain`); `None`: not
    /// drained.
    pub drained_at_ms: Option<i64>,
    /// Why it is out of placement after failing for its own reasons.
    pub quarantine: Option<Quarantine>,
}

/// A host taken out of placement after failing for its own reasons.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub since_ms: i64,
    pub reason: String,
    /// The last error it failed an attempt with.
    pub last_error: Option<String>,
    /// Probe tasks that failed on it for its own reasons since it was
    /// quarantined; each doubles the wait before the next.
    pub failed_probes: u32,
    /// When it may take one probe task.
    pub next_probe_at_ms: i64,
}

impl HostStanding {
    /// Whether it takes no new work but probes.
    pub fn is_open(&self) -> bool {
        self.drained_at_ms.is_none() && self.quarantine.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_view_shows_the_event_it_was_made_from_whenever_it_came() {
        let event = Progress {
            episode: Some(40),
            total_episodes: Some(40),
            episode_return: Some(1.5),
            metrics: vec![Metric {
                name: "loss".into(),
                value: 0.2,
            }],
            message: None,
        };
        let view = ProgressView::from_progress(1, &event, 5);
        assert!(view.shows(&event));
        let later = Progress {
            episode: Some(41),
            ..event.clone()
        };
        assert!(!view.shows(&later));
        let other_metric = Progress {
            metrics: vec![],
            ..event
        };
        assert!(!view.shows(&other_metric));
    }
}
