//! What the trainyard master and its worker hosts share: the messages they
//! exchange over TCP, the frame codec that carries them, the handshake's
//! challenge-response, and the names of the Redis keys both read.
//!
//! # Layout
//! - [`adapter_version`]: adapters' versions and the requirements tasks
//!   pin them with.
//! - [`ids`]: task, attempt, host and worker identifiers.
//! - [`messages`]: every message on the wire, in both directions.
//! - [`frame`]: length-prefixed MessagePack frames with a size limit.
//! - [`auth`]: the HMAC challenge-response that proves a host knows the
//!   cluster secret without sending it.
//! - [`keys`]: Redis key names and lease values.
//! - [`params_schema`]: adapters' params schemas and result metrics.
//! - [`resources`]: host capacity, task requests and attempt assignments.
//! - [`redis_link`] (feature `redis`): a Redis connection that survives
//!   Redis being down at start-up and reconnects after it restarts.
//! - [`timers`]: the intervals and TTLs master and hosts must agree on.
//! - [`tls`] (feature `tls`): rustls configurations from PEM files, the
//!   channel binding of the handshake, host certificates' names.
//!
//! Apart from `redis_link` and `tls` this crate does no I/O; policy (timeouts, retries) belongs to
//! the master and the host.

pub mod adapter_version;
pub mod auth;
pub mod frame;
pub mod ids;
pub mod keys;
pub mod messages;
pub mod params_schema;
#[cfg(feature = "redis")]
pub mod redis_link;
pub mod resources;
pub mod timers;
#[cfg(feature = "tls")]
pub mod tls;

pub use ids::{AttemptRef, HostId, InvalidId, TaskId, WorkerId};
pub use timers::Timers;

/// Version of the wire protocol. A master refuses hosts that speak another.
/// Version 2 added resources: capacity in the hello, the request in each
/// dispatch, the assignment with each attempt, and the liveness probe.
/// Version 3 binds the handshake's proofs to the TLS session (`auth`).
/// Version 4 says of each running attempt whether its lease is held yet.
/// Version 5 batches progress: an update carries the events before its
/// newest (`ProgressUpdate::earlier`) instead of the host dropping them.
/// Version 6 carries the trainers' and adapters' log lines (`Logs`).
/// Version 7 lists the host's cached Python environments in each heartbeat.
/// Version 8 carries what adapters declare: params schemas and result
/// metrics (`AdapterInfo`), and a host's new list of adapters when it
/// reloads them (`HostMessage::Adapters`).
/// Version 9 names the exact adapter version in each dispatch
/// (`Dispatch::version`).
/// Version 10 tells the host's own failures from the task's
/// (`Outcome::HostFault`).
/// Version 11 keeps checkpoints in the artifact store: the welcome says
/// where hosts put them (`Welcome::artifacts`), and a checkpoint may be an
/// object there (`Checkpoint::Stored`).
/// Version 12 ends an attempt whose trainer went quiet: a dispatch carries
/// the task's `progress_timeout_secs`, and a host reports such an attempt
/// as `Outcome::Stalled`.
pub const PROTOCOL_VERSION: u32 = 12;

/// Milliseconds since the Unix epoch, the one wall-clock unit on the wire and
/// in the database.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
