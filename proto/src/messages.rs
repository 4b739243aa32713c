//! Every message on the wire between the master and a host.
//!
//! A connection goes through two phases. In the handshake the master sends a
//! [`Challenge`], the host answers with a [`Hello`] that proves it knows the
//! cluster secret, and the master replies [`Welcome`] (proving the same) or
//! [`MasterMessage::Refused`]. A standby master sends
//! [`MasterMessage::Standby`] instead of the challenge, naming the leader. Only after `Welcome` does the host count as
//! connected; any other message before that closes the connection.
//!
//! After the handshake the master sends dispatches, cancels, stop orders and
//! acknowledgements; the host sends heartbeats, acceptances, progress and
//! reports. Every message about a task names its [`AttemptRef`], so a message
//! from an attempt that is no longer current changes nothing.

use crate::ids::{AttemptRef, HostId};
use crate::resources::{Assignment, HostCapacity, ResourceRequest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Sent by the master as soon as a host connects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Challenge {
    pub protocol: u32,
    /// Fresh random bytes the host must fold into its proof.
    #[serde(with = "serde_bytes")]
    pub nonce: Vec<u8>,
}

/// What an adapter the host carries says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdapterInfo {
    pub name: String,
    pub version: String,
    pub kinds: Vec<String>,
    /// A JSON Schema of the params, by task kind, for the kinds it has one
    /// for (checked by the host: see [`crate::params_schema`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params_schemas: BTreeMap<String, String>,
    /// The metrics its results may hold; empty when it does not say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub result_metrics: Vec<String>,
}

/// An attempt a host is running, in which of its slots, and what it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningAttempt {
    pub attempt: AttemptRef,
    pub slot: u32,
    /// Whether it holds the task's lease. Until it does the attempt has not
    /// started: its host is still taking the lease (Redis may be slow or
    /// away) and may yet find the attempt fenced off.
    pub leased: bool,
    /// The devices and share the host gave it, so the master counts them
    /// busy even for an attempt it no longer considers live.
    #[serde(default)]
    pub assignment: Assignment,
}

/// A Python environment a host has built and keeps in its cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonEnvironment {
    /// The hash of its interpreter, resolved pins and package index, which
    /// names its directory.
    pub key: String,
    /// The requirements it was built for, as the adapter's entry wrote them.
    pub requirements: Vec<String>,
    pub size_bytes: u64,
    /// When an attempt last used it (or it was built).
    pub last_used_ms: i64,
    /// How many running attempts use it now.
    pub in_use: u32,
}

/// The host's answer to the challenge: who it is, what it can run, what it is
/// running right now (after a reconnect), and its proof.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub host_id: HostId,
    /// How many tasks the host runs at once.
    pub slots: u32,
    /// CPUs, memory and devices it offers to tasks.
    #[serde(default)]
    pub capacity: HostCapacity,
    pub adapters: Vec<AdapterInfo>,
    /// Attempts still running from before this connection.
    pub running: Vec<RunningAttempt>,
    /// The host's own random bytes, which the master folds into its proof.
    #[serde(with = "serde_bytes")]
    pub nonce: Vec<u8>,
    /// `auth::host_proof` over both nonces and the host id.
    #[serde(with = "serde_bytes")]
    pub proof: Vec<u8>,
    /// The host's software version, for operators.
    pub agent: String,
    /// The containment layers it enforces on trainers ("cgroup v2",
    /// "landlock abi 6", "network namespace", "user nobody").
    #[serde(default)]
    pub containment: Vec<String>,
}

/// The master accepts the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// `auth::master_proof`: the host checks it before trusting the master.
    #[serde(with = "serde_bytes")]
    pub proof: Vec<u8>,
    /// Where the host puts the checkpoints and outputs its attempts leave
    /// (the master's `artifacts.store`); `None`: nowhere, checkpoints travel
    /// inline within `host.max_checkpoint_bytes` as before.
    #[serde(default)]
    pub artifacts: Option<ArtifactTarget>,
}

/// Where hosts put what attempts leave, as the master tells them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactTarget {
    pub route: ArtifactRoute,
    /// The largest object the store takes (`artifacts.max_object_bytes`):
    /// a host refuses a larger file before sending a byte of it.
    pub max_object_bytes: u64,
}

/// How a host reaches the artifact store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArtifactRoute {
    /// Through the master's HTTP API (`api_url`), over a connection of the
    /// host's own (never the host channel), signed with the cluster
    /// secret; the master keeps the objects under its data directory.
    Master { api_url: String },
    /// A directory mounted at this path on every host and the master (a
    /// shared filesystem): hosts write the objects themselves, then ask the
    /// master's API to record them.
    Directory { path: String, api_url: String },
    /// A bucket of an S3-compatible object store: hosts upload the objects
    /// themselves (in parts), signing with credentials of their own
    /// configuration — never sent here — then ask the master's API to
    /// record them.
    S3 {
        bucket: String,
        /// Objects live under it; empty for the bucket's root.
        prefix: String,
        /// The server's URL; `None` for AWS itself.
        endpoint: Option<String>,
        region: String,
        /// Whether a plain `http://` endpoint is allowed.
        allow_http: bool,
        api_url: String,
    },
}

impl ArtifactRoute {
    /// The master's API, where objects are recorded whatever holds them.
    pub fn api_url(&self) -> &str {
        match self {
            Self::Master { api_url }
            | Self::Directory { api_url, .. }
            | Self::S3 { api_url, .. } => api_url,
        }
    }
}

/// An object in the cluster's artifact store, as the master recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredObject {
    /// Its artifact's id (`GET /v1/tasks/{task}/artifacts/{id}`).
    pub id: i64,
    /// Its key in the store.
    pub key: String,
    pub size: u64,
    /// Lower-case hex SHA-256 of its bytes.
    pub sha256: String,
}

/// A checkpoint as it travels between hosts through the master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Checkpoint {
    /// A file the trainer wrote, captured by the host. `name` is its path
    /// relative to the workspace.
    File {
        name: String,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// An opaque reference the trainer manages itself.
    External(String),
    /// A file the trainer wrote, uploaded by the host to the cluster's
    /// artifact store; the next attempt's host fetches it and checks its
    /// SHA-256 before placing it at `name` in the new workspace.
    Stored {
        name: String,
        object: Box<StoredObject>,
    },
}

/// Run one attempt of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dispatch {
    pub attempt: AttemptRef,
    pub adapter: String,
    /// The exact version of the adapter to run: one the host advertised.
    #[serde(default)]
    pub version: String,
    pub kind: String,
    /// The task's parameters as submitted (a JSON object).
    pub params: String,
    /// The last checkpoint an earlier attempt reported.
    pub checkpoint: Option<Checkpoint>,
    /// Wall-clock limit for the trainer, if the task has one.
    pub timeout_secs: Option<u64>,
    /// How long the trainer may go without a progress event before the
    /// host ends the attempt as stalled, if the task (or its sweep) sets
    /// it; otherwise the adapter's entry on the host may.
    #[serde(default)]
    pub progress_timeout_secs: Option<u64>,
    /// What the task asked for; the host picks the devices.
    #[serde(default)]
    pub resources: ResourceRequest,
}

/// A named figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    pub value: f64,
}

/// A progress event from a running trainer, as the adapter read it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub episode: Option<u64>,
    pub total_episodes: Option<u64>,
    pub episode_return: Option<f64>,
    pub metrics: Vec<Metric>,
    pub message: Option<String>,
}

/// Most progress events one update carries (`earlier` and `progress`); a
/// host with more sends an update at once.
pub const MAX_PROGRESS_BATCH: usize = 256;

/// The progress of an attempt since the previous update: the newest event,
/// the ones before it, and the latest checkpoint if one was announced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressUpdate {
    pub attempt: AttemptRef,
    /// The newest event.
    pub progress: Progress,
    pub checkpoint: Option<Checkpoint>,
    /// The events since the previous update before `progress`, oldest
    /// first, so a curve misses none (at most [`MAX_PROGRESS_BATCH`] - 1).
    #[serde(default)]
    pub earlier: Vec<Progress>,
    /// `progress` is the newest event already sent, restated only to carry
    /// a checkpoint stored since: no new point of the curve.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restated: bool,
}

/// Most lines one [`LogBatch`] carries.
pub const MAX_LOG_BATCH: usize = 256;

/// Most text bytes one [`LogBatch`] carries (a single longer line still
/// goes, alone).
pub const MAX_LOG_BATCH_BYTES: usize = 64 << 10;

/// Longest captured line: a host cuts longer ones before shipping them
/// (whatever `host.max_line_bytes` allows the adapter), and the master
/// cuts any longer one it receives.
pub const MAX_LOG_LINE_BYTES: usize = 64 << 10;

/// Where a captured log line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// The trainer's standard output.
    Stdout,
    /// The trainer's standard error.
    Stderr,
    /// The adapter: its `host.log` records and its own console output.
    Adapter,
}

impl LogStream {
    /// The name on the API and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
            Self::Adapter => "adapter",
        }
    }

    /// The stream of a stored name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "stdout" => Some(Self::Stdout),
            "stderr" => Some(Self::Stderr),
            "adapter" => Some(Self::Adapter),
            _ => None,
        }
    }
}

/// One captured line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub stream: LogStream,
    /// When the host read it.
    pub at_ms: i64,
    pub text: String,
}

/// Log lines of one attempt, oldest first (at most [`MAX_LOG_BATCH`] lines
/// and [`MAX_LOG_BATCH_BYTES`]). `dropped` counts the lines the host
/// dropped since the previous batch because the attempt printed faster
/// than its lines could be shipped; a marker line among `lines` says where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogBatch {
    pub attempt: AttemptRef,
    pub lines: Vec<LogLine>,
    #[serde(default)]
    pub dropped: u64,
}

/// How an attempt ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// The trainer succeeded; these are its results.
    Completed {
        metrics: Vec<Metric>,
        checkpoint: Option<Checkpoint>,
        summary: Option<String>,
    },
    /// The attempt failed. `retryable` says whether another attempt may
    /// succeed.
    Failed { message: String, retryable: bool },
    /// The host could not start or contain the trainer for reasons of its
    /// own (a program it cannot execute, its workspace or cgroup set-up, its
    /// supervisor, a containment limit of its own too small to start it):
    /// not the task's fault. The task goes back to the queue without using
    /// one of its attempts, preferably to another host.
    HostFault { message: String },
    /// The trainer was stopped because the task was cancelled.
    Cancelled,
    /// The host could not renew the attempt's lease in time and stopped the
    /// trainer itself; the master may already have given the task away.
    LeaseLost { message: String },
    /// The trainer was alive but reported no progress for the attempt's
    /// progress timeout, so the host stopped it. `message` says how long it
    /// was quiet and ends with its last output lines.
    Stalled { message: String },
}

/// The final report of one attempt. The host keeps it, in memory and in
/// Redis, until the master acknowledges it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptReport {
    pub attempt: AttemptRef,
    pub host: HostId,
    pub slot: u32,
    pub outcome: Outcome,
    /// What the attempt held until it ended.
    #[serde(default)]
    pub assignment: Assignment,
    /// Wall-clock milliseconds from lease to report.
    pub duration_ms: u64,
    pub finished_at_ms: i64,
    /// The attempt's last progress event, if it had any. Sent over the
    /// connection before the report too; carried here so that a report the
    /// master takes from Redis (its host gone) still ends the task with the
    /// progress its trainer last reported.
    #[serde(default)]
    pub progress: Option<Progress>,
}

/// Host to master.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum HostMessage {
    Hello(Hello),
    /// Sent every heartbeat interval: what each busy slot runs.
    Heartbeat {
        running: Vec<RunningAttempt>,
        /// The Python environments in its cache.
        #[serde(default)]
        environments: Vec<PythonEnvironment>,
    },
    /// The host holds the attempt's lease and has started it in `slot`
    /// with these devices and this share.
    Accepted {
        attempt: AttemptRef,
        slot: u32,
        #[serde(default)]
        assignment: Assignment,
    },
    /// The host did not start the attempt and holds no lease for it.
    Rejected {
        attempt: AttemptRef,
        reason: String,
    },
    Progress(ProgressUpdate),
    Report(AttemptReport),
    /// Captured trainer and adapter output. Sent when nothing more urgent
    /// waits, so it never holds up the messages above.
    Logs(LogBatch),
    /// The adapters the host carries changed (a file was added, replaced
    /// or removed while it ran): the whole new list, as in the hello.
    Adapters {
        adapters: Vec<AdapterInfo>,
    },
}

/// Master to host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum MasterMessage {
    Challenge(Challenge),
    Welcome(Welcome),
    /// The handshake failed; the master closes the connection after this.
    Refused {
        reason: String,
    },
    /// This master is a standby: it does not lead, so it dispatches nothing.
    /// Sent in place of the challenge; the master closes the connection
    /// after it. `leader` is the host address the leading master
    /// advertises, when one leads. A host follows it only when it is one of
    /// its own configured master addresses.
    Standby {
        leader: Option<String>,
    },
    Dispatch(Dispatch),
    /// Stop the attempt because the task was cancelled.
    Cancel {
        attempt: AttemptRef,
    },
    /// Stop the attempt: the master no longer considers it the task's live
    /// attempt (it was given away, or the task has ended).
    Stop {
        attempt: AttemptRef,
        reason: String,
    },
    HeartbeatAck,
    /// Answer with a heartbeat now: another connection claims this host's
    /// id, and a live connection keeps its place only by answering.
    Probe,
    /// The master has recorded this report; the host may forget it.
    ReportAck {
        attempt: AttemptRef,
    },
}

impl HostMessage {
    /// A short name for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hello(_) => "hello",
            Self::Heartbeat { .. } => "heartbeat",
            Self::Accepted { .. } => "accepted",
            Self::Rejected { .. } => "rejected",
            Self::Progress(_) => "progress",
            Self::Report(_) => "report",
            Self::Logs(_) => "logs",
            Self::Adapters { .. } => "adapters",
        }
    }
}

impl MasterMessage {
    /// A short name for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Challenge(_) => "challenge",
            Self::Welcome(_) => "welcome",
            Self::Refused { .. } => "refused",
            Self::Standby { .. } => "standby",
            Self::Dispatch(_) => "dispatch",
            Self::Cancel { .. } => "cancel",
            Self::Stop { .. } => "stop",
            Self::HeartbeatAck => "heartbeat-ack",
            Self::Probe => "probe",
            Self::ReportAck { .. } => "report-ack",
        }
    }
}
