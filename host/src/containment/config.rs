//! How the operator configures containment: `[host.containment]` for every
//! trainer, and per adapter in `[[host.adapters]]`.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A layer the host enforces unless the operator turns it off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    #[default]
    On,
    Off,
}

/// The word for "keep the host's own user" in `host.containment.user`.
pub const USER_OFF: &str = "off";

/// `[host.containment]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContainmentSettings {
    /// A cgroup per attempt: every process of the attempt is killed when it
    /// ends, and the limits below apply.
    pub cgroup: Switch,
    /// Where attempt cgroups are made, relative to each hierarchy's root.
    pub cgroup_parent: String,
    /// Landlock: read-write in the workspace, read-only where allowed.
    pub landlock: Switch,
    /// A network namespace of the trainer's own, with only loopback.
    pub network: Switch,
    /// A mount namespace of the trainer's own: a filesystem view holding
    /// only what it may use (no `/run`, no other socket directory).
    pub mount: Switch,
    /// A PID namespace of the trainer's own, with its own `/proc`.
    pub pid: Switch,
    /// The workspace on a filesystem whose size is `limits.disk`.
    pub disk: Switch,
    /// A system-call filter (`seccomp`).
    pub seccomp: Switch,
    /// Sandboxes prepared ahead of attempts (one per slot, each used by
    /// one attempt): the layers above cost a launch almost nothing. Off,
    /// every attempt's confinement is made at its launch.
    pub prepared_sandboxes: Switch,
    /// The user trainers run as when the host runs as root, or `"off"` to
    /// keep the host's user.
    pub user: String,
    /// Paths every trainer may read, besides the defaults.
    pub read_only: Vec<PathBuf>,
    /// Limits for every attempt, unless its adapter or task says otherwise.
    pub limits: Limits,
}

impl Default for ContainmentSettings {
    fn default() -> Self {
        Self {
            cgroup: Switch::On,
            cgroup_parent: "trainyard".into(),
            landlock: Switch::On,
            network: Switch::On,
            mount: Switch::On,
            pid: Switch::On,
            disk: Switch::On,
            seccomp: Switch::On,
            prepared_sandboxes: Switch::On,
            user: "nobody".into(),
            read_only: vec![],
            limits: Limits {
                pids: Some(1024),
                open_files: Some(4096),
                ..Limits::default()
            },
        }
    }
}

/// Per-attempt limits; what is left out is not limited (or, for an
/// adapter's limits, comes from `[host.containment.limits]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Memory of all the attempt's processes together ("512MiB").
    #[serde(deserialize_with = "trainyard_proto::resources::memory_amount::deserialize")]
    pub memory: Option<u64>,
    /// CPU time, in cores (0.5 is half of one core).
    pub cpus: Option<f64>,
    /// Processes and threads at once.
    pub pids: Option<u64>,
    /// Open files per process.
    pub open_files: Option<u64>,
    /// Bytes the workspace may hold ("10GiB").
    #[serde(deserialize_with = "trainyard_proto::resources::memory_amount::deserialize")]
    pub disk: Option<u64>,
}

/// Whether an adapter's trainers get a network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Only a loopback of their own.
    #[default]
    None,
    /// The host's network: a trust decision about this adapter.
    Host,
}

/// The containment settings of one adapter in `[[host.adapters]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdapterContainment {
    pub network: NetworkMode,
    /// Paths its trainers may read, besides the host's.
    pub read_only: Vec<PathBuf>,
    /// Paths its trainers may write, besides the workspace.
    pub read_write: Vec<PathBuf>,
    /// Unix sockets its trainers may connect to (a local service the
    /// operator trusts them with), by path; no other socket is in their view.
    pub sockets: Vec<PathBuf>,
    /// System calls of the filter's profile its trainers may make after
    /// all ("ptrace", "perf_event_open", "unshare", ...).
    pub allow_syscalls: Vec<String>,
    /// Overrides of the host's limits.
    pub limits: Limits,
}
