//! The master's settings, as the binary hands them over after merging
//! `config.toml`, the environment and flags.

use std::net::SocketAddr;
use std::time::Duration;
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::tls::ServerTls;
use trainyard_proto::Timers;

/// Default of `master.reserve_after`: how long the first task in queue
/// order waits without fitting before it reserves a host.
pub const DEFAULT_RESERVE_AFTER: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// Where hosts connect (TCP, the framed protocol).
    pub hosts_listen: SocketAddr,
    /// Where the HTTP API listens.
    pub api_listen: SocketAddr,
    pub database_url: String,
    pub redis_url: String,
    /// Prefix of every Redis key, so clusters can share a Redis.
    pub key_prefix: String,
    pub timers: Timers,
    /// Hosts prove they know it in the handshake.
    pub cluster_secret: ClusterSecret,
    /// The cluster's own API token: an admin ([`crate::access`]).
    pub api_token: String,
    /// Reads without a token see every team's work, as before teams
    /// existed (`api.open_reads`).
    pub open_reads: bool,
    /// Which adapters each team may run (`master.team_adapters`).
    pub adapter_rules: crate::access::AdapterRules,
    /// Largest frame accepted from a host.
    pub max_frame_bytes: usize,
    /// Most host connections at once, handshaking ones included.
    pub max_connections: usize,
    /// Started attempts a task gets unless it asks for another number.
    pub default_max_attempts: u32,
    /// Adapters accepted at submit before any host carrying them has
    /// connected.
    pub known_adapters: Vec<String>,
    /// Most commands the scheduler handles in one turn (one transaction).
    pub max_batch: usize,
    /// How long the first task in queue order may wait without fitting
    /// anywhere before it reserves a host.
    pub reserve_after: Duration,
    /// Which version runs a task that does not pin one exactly: the
    /// newest the fleet carries, or the newest its host carries.
    pub unpinned_version: crate::placement::VersionChoice,
    /// TLS on both listeners, or plain TCP when unset. Its `client_ca`
    /// makes hosts present a certificate naming their id (mutual TLS); the
    /// API never asks the CLI for one.
    pub tls: Option<ServerTls>,
    /// PostgreSQL: how long a leader that stopped answering keeps the lead
    /// before a standby may take it ([`crate::leadership`]).
    pub leader_ttl: Duration,
    /// The host address other masters send hosts to while this one leads;
    /// the host listener's address when unset (the machine's name in place
    /// of an unspecified IP).
    pub advertise_hosts: Option<String>,
    /// The API base URL other masters send the CLI to while this one leads;
    /// derived from the API listener when unset.
    pub advertise_api: Option<String>,
    /// When a host is quarantined and probed (`master.quarantine`).
    pub quarantine: crate::standing::QuarantinePolicy,
    /// How many of a task's stalls do not use one of its attempts
    /// (`master.free_stalled_retries`, see [`crate::stall`]).
    pub free_stalled_retries: u32,
    /// Where the checkpoints and outputs hosts upload are kept; `None`:
    /// nowhere (checkpoints travel inline, as small as hosts allow).
    pub artifacts: Option<crate::artifacts::ArtifactsConfig>,
}

impl MasterConfig {
    /// Settings for a master on loopback ports chosen by the OS; for tests
    /// and benchmarks.
    pub fn local(
        database_url: &str,
        redis_url: &str,
        secret: ClusterSecret,
        api_token: &str,
    ) -> Self {
        Self {
            hosts_listen: "127.0.0.1:0".parse().expect("address"),
            api_listen: "127.0.0.1:0".parse().expect("address"),
            database_url: database_url.into(),
            redis_url: redis_url.into(),
            key_prefix: String::new(),
            timers: Timers::default(),
            cluster_secret: secret,
            api_token: api_token.into(),
            open_reads: false,
            adapter_rules: Default::default(),
            max_frame_bytes: trainyard_proto::frame::DEFAULT_MAX_FRAME,
            max_connections: 4096,
            default_max_attempts: 3,
            known_adapters: vec![],
            max_batch: 4096,
            reserve_after: DEFAULT_RESERVE_AFTER,
            unpinned_version: Default::default(),
            tls: None,
            leader_ttl: crate::leadership::DEFAULT_LEADER_TTL,
            advertise_hosts: None,
            advertise_api: None,
            quarantine: Default::default(),
            free_stalled_retries: crate::stall::DEFAULT_FREE_STALLED_RETRIES,
            artifacts: None,
        }
    }
}
