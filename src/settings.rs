//! Configuration: built-in defaults, then `config.toml` (or `--config`),
//! then `TRAINYARD_…` environment variables (sections joined by `__`, e.g.
//! `TRAINYARD_MASTER__API_LISTEN`), then command-line flags (`--set
//! key=value`, then a role's own flags) — merged by figment. Unknown keys
//! are errors in every layer, so a typo never silently falls back to a
//! default.
//!
//! - `keys`: which keys exist and how a raw text value is read for each.
//! - [`env`]: the environment layer and the variables that are not
//!   configuration.
//! - `layer`: the layers as figment providers, and each value's [`Origin`].
//! - [`effective`]: the merged configuration key by key, secrets redacted.

pub mod effective;
pub mod env;
mod keys;
mod layer;

pub use env::{EnvError, NOT_CONFIGURATION};
pub use layer::Origin;

use figment::providers::{Format, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use layer::{Layer, LayerKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use trainyard_proto::Timers;

/// The file read when no `--config` is given, if it exists.
pub const DEFAULT_FILE: &str = "config.toml";

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where the embedded database, generated secrets and workspaces live by default.
    pub data_dir: PathBuf,
    pub redis_url: String,
    pub redis_key_prefix: String,
    pub database_url: String,
    pub cluster: ClusterSection,
    pub api: ApiSection,
    pub master: MasterSection,
    pub host: HostSection,
    pub tls: TlsSection,
    pub timers: Timers,
    pub artifacts: ArtifactsSection,
}

/// `[artifacts]`: where the checkpoints and outputs attempts leave are
/// kept. The master's word is the cluster's: hosts learn it when they
/// connect.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArtifactsSection {
    /// `embedded` (under `data_dir/artifacts`, hosts upload through the
    /// master), `file:///path` (a directory every host and the master
    /// mount at that path) or `s3://bucket/prefix` (an S3-compatible
    /// object store, `[artifacts.s3]`).
    pub store: String,
    /// The largest object (a checkpoint or an output file) the store takes.
    pub max_object_bytes: u64,
    pub s3: S3Section,
}

impl Default for ArtifactsSection {
    fn default() -> Self {
        Self {
            store: "embedded".into(),
            max_object_bytes: trainyard_artifacts::DEFAULT_MAX_OBJECT_BYTES,
            s3: S3Section::default(),
        }
    }
}

/// `[artifacts.s3]`: where an `s3://` store's server is (the master's word,
/// told to hosts), and the credentials each host and the master sign with
/// (read by each from its own configuration or environment; never sent).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Section {
    /// The server's URL; unset for AWS itself.
    pub endpoint: Option<String>,
    pub region: String,
    /// Allow a plain `http://` endpoint (a server on the same machine or
    /// network).
    pub allow_http: bool,
    pub access_key_id: Option<String>,
    /// The secret key inline; prefer `secret_access_key_file`.
    pub secret_access_key: Option<String>,
    /// A file holding the secret key.
    pub secret_access_key_file: Option<PathBuf>,
}

impl Default for S3Section {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: trainyard_artifacts::s3::DEFAULT_REGION.into(),
            allow_http: false,
            access_key_id: None,
            secret_access_key: None,
            secret_access_key_file: None,
        }
    }
}

/// `[tls]`: TLS on the master's two listeners, and what hosts and the CLI
/// trust. See `crate::tls` for what each role makes of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSection {
    /// TLS between hosts and the master, and HTTPS on the API.
    pub enabled: bool,
    /// The CA certificate(s) (PEM) the master's certificate is checked
    /// against by hosts and the CLI, and hosts' certificates by the master.
    pub ca: Option<PathBuf>,
    /// This process's certificate chain (PEM): the master's server
    /// certificate, or a host's client certificate for mutual TLS.
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of `cert`.
    pub key: Option<PathBuf>,
    /// The master requires every host to present a certificate signed by
    /// `ca` that names the host's id (mutual TLS).
    pub require_host_certificates: bool,
    /// The name the master's certificate must carry, when it is not the host
    /// part of `host.master` / `api.url`.
    pub server_name: Option<String>,
    /// Hosts and the CLI accept any certificate from the master. For tests
    /// only: anyone on the path can pose as the master. Logged loudly.
    pub insecure_skip_verify: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    pub secret: Option<String>,
    pub secret_file: PathBuf,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSection {
    pub url: String,
    pub token: Option<String>,
    pub token_file: PathBuf,
    /// Reads without a token see every team's work, as before teams
    /// existed: for a lab whose API port only trusted people reach.
    pub open_reads: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MasterSection {
    pub hosts_listen: SocketAddr,
    pub api_listen: SocketAddr,
    pub max_connections: usize,
    pub max_frame_bytes: usize,
    pub default_max_attempts: u32,
    pub known_adapters: Vec<String>,
    pub max_batch: usize,
    #[serde(with = "humantime_serde")]
    pub reserve_after: Duration,
    /// `fleet` or `host`: see [`trainyard_master::placement::VersionChoice`].
    pub unpinned_version: trainyard_master::placement::VersionChoice,
    /// PostgreSQL with standby masters: how long a leader that stopped
    /// answering keeps the lead.
    #[serde(with = "humantime_serde")]
    pub leader_ttl: Duration,
    /// The host address other masters send hosts to while this one leads.
    pub advertise_hosts: Option<String>,
    /// The API URL other masters send the CLI to while this one leads.
    pub advertise_api: Option<String>,
    /// When a host failing for its own reasons is quarantined, and probed.
    pub quarantine: trainyard_master::standing::QuarantinePolicy,
    /// How many of a task's stalled attempts (no progress for its
    /// progress timeout) are requeued without using one of its attempts.
    pub free_stalled_retries: u32,
    /// Which adapters (and version ranges) each team may run:
    /// `{ red = ["ppo@^1.2", "noop"], "*" = [] }`; a team not listed, with
    /// no `"*"` entry, may run any.
    pub team_adapters: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostSection {
    pub id: Option<String>,
    pub master: String,
    pub slots: u32,
    pub work_dir: PathBuf,
    pub cache_dir: Option<PathBuf>,
    /// Where compiled adapters are kept, when not in `cache_dir` (which
    /// keeps Python environments either way): hosts of one machine may share
    /// it (files are written atomically), and the test suite points every
    /// host at one so each adapter compiles once a run.
    pub adapter_cache_dir: Option<PathBuf>,
    pub on_adapter_error: OnAdapterError,
    pub supervisor: Option<PathBuf>,
    pub pass_env: Vec<String>,
    pub trainer_env: std::collections::BTreeMap<String, String>,
    pub max_checkpoint_bytes: u64,
    pub max_line_bytes: usize,
    pub stderr_tail_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub progress_interval: Duration,
    pub keep_workspaces: bool,
    #[serde(with = "humantime_serde")]
    pub watch_adapters: Duration,
    pub max_frame_bytes: usize,
    pub adapter_memory_bytes: u64,
    #[serde(with = "humantime_serde")]
    pub adapter_call_timeout: Duration,
    pub adapter_instances: u32,
    pub adapter_log_records: u32,
    pub adapter_log_bytes: usize,
    /// Where the host serves `/metrics`; off when unset.
    pub metrics_listen: Option<SocketAddr>,
    pub resources: trainyard_host::config::ResourceSettings,
    /// How trainers are contained (`[host.containment]`).
    pub containment: trainyard_host::containment::ContainmentSettings,
    /// The installer and index of trainers' Python environments
    /// (`[host.python]`).
    pub python: trainyard_host::python_env::PythonSettings,
    pub adapters: Vec<AdapterEntry>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnAdapterError {
    Refuse,
    Skip,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterEntry {
    pub path: PathBuf,
    #[serde(default)]
    pub programs: Vec<String>,
    /// `"none"` (a loopback of their own) or `"host"`: whether this
    /// adapter's trainers may use the host's network.
    #[serde(default)]
    pub network: trainyard_host::containment::NetworkMode,
    /// Paths its trainers may read, besides the host's defaults.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Paths its trainers may write, besides their workspace.
    #[serde(default)]
    pub read_write: Vec<PathBuf>,
    /// Unix sockets its trainers may connect to, by path (with the mount
    /// layer on, no other socket is in their view).
    #[serde(default)]
    pub sockets: Vec<PathBuf>,
    /// System calls the filter refuses that its trainers may make after
    /// all (`["ptrace"]`).
    #[serde(default)]
    pub allow_syscalls: Vec<String>,
    /// Overrides of `[host.containment.limits]` for its trainers.
    #[serde(default)]
    pub limits: trainyard_host::containment::Limits,
    /// The Python environment its trainers run in:
    /// `python = { requirements = ["numpy>=1.26"] }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<trainyard_host::python_env::PythonRequirements>,
    /// How long its trainers may go without a progress event when their
    /// task sets no `progress_timeout_secs` (`progress_timeout = "10m"`);
    /// unset: no limit.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub progress_timeout: Option<Duration>,
}

impl AdapterEntry {
    /// An entry with the host's defaults for everything but its programs.
    pub fn new(path: impl Into<PathBuf>, programs: &[&str]) -> AdapterEntry {
        AdapterEntry {
            path: path.into(),
            programs: programs.iter().map(|p| p.to_string()).collect(),
            network: Default::default(),
            read_only: vec![],
            read_write: vec![],
            sockets: vec![],
            allow_syscalls: vec![],
            limits: Default::default(),
            python: None,
            progress_timeout: None,
        }
    }

    /// Its containment settings, as the host takes them.
    pub fn containment(&self) -> trainyard_host::containment::AdapterContainment {
        trainyard_host::containment::AdapterContainment {
            network: self.network,
            read_only: self.read_only.clone(),
            read_write: self.read_write.clone(),
            sockets: self.sockets.clone(),
            allow_syscalls: self.allow_syscalls.clone(),
            limits: self.limits.clone(),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            data_dir: "data".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_key_prefix: String::new(),
            database_url: "sqlite://data/trainyard.db".into(),
            cluster: ClusterSection::default(),
            api: ApiSection::default(),
            master: MasterSection::default(),
            host: HostSection::default(),
            tls: TlsSection::default(),
            timers: Timers::default(),
            artifacts: ArtifactsSection::default(),
        }
    }
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            secret: None,
            secret_file: "data/cluster-secret".into(),
        }
    }
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:7701".into(),
            token: None,
            token_file: "data/api-token".into(),
            open_reads: false,
        }
    }
}

impl Default for MasterSection {
    fn default() -> Self {
        Self {
            hosts_listen: "127.0.0.1:7700".parse().expect("address"),
            api_listen: "127.0.0.1:7701".parse().expect("address"),
            max_connections: 4096,
            max_frame_bytes: trainyard_proto::frame::DEFAULT_MAX_FRAME,
            default_max_attempts: 3,
            known_adapters: vec![],
            max_batch: 4096,
            reserve_after: trainyard_master::config::DEFAULT_RESERVE_AFTER,
            leader_ttl: trainyard_master::leadership::DEFAULT_LEADER_TTL,
            advertise_hosts: None,
            advertise_api: None,
            unpinned_version: Default::default(),
            quarantine: Default::default(),
            free_stalled_retries: trainyard_master::stall::DEFAULT_FREE_STALLED_RETRIES,
            team_adapters: BTreeMap::new(),
        }
    }
}

impl Default for HostSection {
    fn default() -> Self {
        Self {
            id: None,
            master: "127.0.0.1:7700".into(),
            slots: 2,
            work_dir: "work".into(),
            cache_dir: Some("data/cache".into()),
            adapter_cache_dir: None,
            on_adapter_error: OnAdapterError::Refuse,
            supervisor: None,
            pass_env: vec!["PATH".into()],
            trainer_env: Default::default(),
            max_checkpoint_bytes: 8 << 20,
            max_line_bytes: 64 << 10,
            stderr_tail_bytes: 8 << 10,
            progress_interval: Duration::from_millis(250),
            keep_workspaces: false,
            watch_adapters: Duration::from_secs(2),
            max_frame_bytes: trainyard_proto::frame::DEFAULT_MAX_FRAME,
            adapter_memory_bytes: 64 << 20,
            adapter_call_timeout: Duration::from_secs(5),
            adapter_instances: 64,
            adapter_log_records: 1000,
            metrics_listen: None,
            adapter_log_bytes: 1 << 20,
            resources: Default::default(),
            containment: Default::default(),
            python: Default::default(),
            adapters: vec![
                AdapterEntry::new("adapters/dist/python-trainer.wasm", &["python3"]),
                AdapterEntry::new("adapters/dist/noop.wasm", &["true"]),
            ],
        }
    }
}

/// Where the configuration came from: the file read, and each value's
/// origin.
#[derive(Debug, Clone)]
pub struct Source {
    pub file: Option<PathBuf>,
    figment: Figment,
}

impl Source {
    /// Where the effective value of `key` (dotted: `master.api_listen`) came from.
    pub fn origin(&self, key: &str) -> Origin {
        layer::origin_of(&self.figment, key)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
    #[error(transparent)]
    Environment(#[from] EnvError),
    #[error("--set {arg}: {reason}")]
    Set { arg: String, reason: String },
    #[error("invalid configuration: {0}")]
    Invalid(#[from] Box<figment::Error>),
}

/// What the configuration is merged from, besides the defaults.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// `--config`; without it `config.toml` if it exists.
    pub file: Option<PathBuf>,
    /// The environment (every variable; those that are not configuration
    /// are passed over).
    pub env: Vec<(String, String)>,
    /// `--set key=value`, in order.
    pub set: Vec<String>,
    /// A role's flags, as a nested object of the keys they override.
    pub flags: serde_json::Value,
}

impl Inputs {
    /// The process's own environment, a file and flags.
    pub fn from_process(file: Option<&Path>, set: &[String], flags: serde_json::Value) -> Self {
        Self {
            file: file.map(Path::to_path_buf),
            env: std::env::vars_os()
                .map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                })
                .collect(),
            set: set.to_vec(),
            flags,
        }
    }
}

impl Settings {
    /// Merges defaults, the config file (`path`, else `config.toml` if it
    /// exists), the process environment, and `flags` (a nested object of the
    /// flags the user gave).
    pub fn load(
        path: Option<&Path>,
        flags: serde_json::Value,
    ) -> Result<(Settings, Source), SettingsError> {
        Self::load_from(Inputs::from_process(path, &[], flags))
    }

    /// Merges the defaults and `inputs`, lowest precedence first: file,
    /// environment, `--set`, flags.
    pub fn load_from(inputs: Inputs) -> Result<(Settings, Source), SettingsError> {
        let file = match inputs.file {
            Some(p) if !p.exists() => return Err(SettingsError::Missing(p)),
            Some(p) => Some(p),
            None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.exists()),
        };
        let mut figment = Figment::from(defaults_layer());
        if let Some(f) = &file {
            figment = figment.merge(Toml::file_exact(f));
        }
        figment = figment
            .merge(env::layer(inputs.env)?)
            .merge(set_layer(&inputs.set)?)
            .merge(flags_layer(&inputs.flags));
        let settings: Settings = figment.extract().map_err(Box::new)?;
        Ok((settings, Source { file, figment }))
    }
}

fn defaults_layer() -> Layer {
    let data = match Value::serialize(Settings::default()) {
        Ok(Value::Dict(_, dict)) => dict,
        _ => unreachable!("the defaults serialize as a dict"),
    };
    Layer::new(LayerKind::Defaults, data, BTreeMap::new())
}

/// `--set key=value` flags: any key, read like an environment variable's value.
fn set_layer(args: &[String]) -> Result<Layer, SettingsError> {
    let mut data = Dict::new();
    let mut names = BTreeMap::new();
    for arg in args {
        let fail = |reason: String| SettingsError::Set {
            arg: arg.clone(),
            reason,
        };
        let (key, raw) = arg
            .split_once('=')
            .ok_or_else(|| fail("expected key=value, e.g. --set timers.lease_ttl=30s".into()))?;
        let key = key.trim();
        let path: Vec<String> = key.split('.').map(str::to_string).collect();
        let kind = keys::kind_of(&path).map_err(|e| fail(format!("no key {}", e.0)))?;
        let value = keys::parse(kind, raw).map_err(fail)?;
        layer::insert(&mut data, &path, value);
        names.insert(key.to_string(), format!("--set {key}"));
    }
    Ok(Layer::new(LayerKind::Set, data, names))
}

/// A role's flags (already typed by the command line).
fn flags_layer(flags: &serde_json::Value) -> Layer {
    fn walk(node: &serde_json::Value, path: &mut Vec<String>, out: &mut BTreeMap<String, String>) {
        match node {
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    path.push(k.clone());
                    walk(v, path, out);
                    path.pop();
                }
            }
            _ if path.is_empty() => {}
            _ => {
                out.insert(path.join("."), layer::flag_name(path));
            }
        }
    }
    let mut names = BTreeMap::new();
    walk(flags, &mut vec![], &mut names);
    let data = match Value::serialize(flags) {
        Ok(Value::Dict(_, dict)) => dict,
        _ => Dict::new(),
    };
    Layer::new(LayerKind::Flag, data, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_file(contents: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, contents.as_bytes()).unwrap();
        f
    }

    /// Loads `file` with no environment at all, whatever the test runner's is.
    fn load(file: &Path, flags: serde_json::Value) -> Result<(Settings, Source), SettingsError> {
        Settings::load_from(Inputs {
            file: Some(file.to_path_buf()),
            flags,
            ..Inputs::default()
        })
    }

    #[test]
    fn a_gpus_device_files_come_from_the_environment_as_a_list_keeping_its_name() {
        let file = with_file("");
        let env = |value: &str| Inputs {
            file: Some(file.path().to_path_buf()),
            env: vec![(
                "TRAINYARD_HOST__RESOURCES__GPU_FILES__Gpu0".to_string(),
                value.to_string(),
            )],
            ..Inputs::default()
        };
        let (s, _) = Settings::load_from(env(r#"["/dev/nvidia0", "/dev/nvidiactl"]"#)).unwrap();
        assert_eq!(
            s.host.resources.gpu_files["Gpu0"],
            [PathBuf::from("/dev/nvidia0"), "/dev/nvidiactl".into()]
        );
        let refused = Settings::load_from(env("/dev/nvidia0"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("a list is written in brackets"),
            "{refused}"
        );
    }

    #[test]
    fn the_shipped_config_file_is_valid_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
        let (from_file, _) = load(&path, serde_json::json!({})).unwrap();
        let defaults = Settings::default();
        assert_eq!(
            serde_json::to_value(&from_file).unwrap(),
            serde_json::to_value(&defaults).unwrap(),
            "config.toml documents the defaults; keep them in step"
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let f = with_file("[master]\napi_listn = \"127.0.0.1:1\"\n");
        let err = load(f.path(), serde_json::json!({}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("api_listn"), "{err}");
    }

    #[test]
    fn flags_override_the_file() {
        let f = with_file("[host]\nslots = 3\nmaster = \"10.0.0.1:7700\"\n");
        let (s, source) = load(f.path(), serde_json::json!({"host": {"slots": 5}})).unwrap();
        assert_eq!(s.host.slots, 5);
        assert_eq!(s.host.master, "10.0.0.1:7700");
        assert_eq!(source.origin("host.slots"), Origin::Flag("--slots".into()));
        assert_eq!(
            source.origin("host.master"),
            Origin::File(f.path().to_path_buf())
        );
        assert_eq!(source.origin("host.work_dir"), Origin::Default);
    }

    #[test]
    fn several_masters_are_one_comma_separated_text_in_the_file_and_the_environment() {
        let f = with_file(
            "[host]\nmaster = \"10.0.0.1:7700, 10.0.0.2:7700\"\n\
             [api]\nurl = \"http://10.0.0.1:7701,http://10.0.0.2:7701\"\n",
        );
        let (s, _) = load(f.path(), serde_json::json!({})).unwrap();
        let masters = trainyard_host::link::masters::MasterAddrs::parse(&s.host.master).unwrap();
        assert_eq!(masters.as_slice(), ["10.0.0.1:7700", "10.0.0.2:7700"]);
        assert_eq!(s.api.url, "http://10.0.0.1:7701,http://10.0.0.2:7701");
        let (s, source) = Settings::load_from(Inputs {
            file: Some(f.path().to_path_buf()),
            env: vec![("TRAINYARD_HOST__MASTER".into(), "m1:7700,m2:7700".into())],
            ..Inputs::default()
        })
        .unwrap();
        let masters = trainyard_host::link::masters::MasterAddrs::parse(&s.host.master).unwrap();
        assert_eq!(masters.as_slice(), ["m1:7700", "m2:7700"]);
        assert_eq!(
            source.origin("host.master"),
            Origin::Environment("TRAINYARD_HOST__MASTER".into())
        );
    }

    #[test]
    fn durations_are_human_text() {
        let f = with_file("[timers]\nlease_ttl = \"3s\"\nheartbeat_interval = \"300ms\"\n");
        let (s, _) = load(f.path(), serde_json::json!({})).unwrap();
        assert_eq!(s.timers.lease_ttl, Duration::from_secs(3));
        assert_eq!(s.timers.heartbeat_interval, Duration::from_millis(300));
    }

    #[test]
    fn the_environment_sits_between_the_file_and_the_flags() {
        let f = with_file("redis_url = \"redis://file:1\"\n[timers]\nlease_ttl = \"3s\"\n");
        let env = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let (s, source) = Settings::load_from(Inputs {
            file: Some(f.path().to_path_buf()),
            env: env(&[
                ("TRAINYARD_REDIS_URL", "redis://env:2"),
                ("TRAINYARD_TIMERS__LEASE_TTL", "30s"),
                ("TRAINYARD_MASTER__KNOWN_ADAPTERS", "[a, b]"),
                ("TRAINYARD_HOST__KEEP_WORKSPACES", "true"),
            ]),
            set: vec!["timers.lease_ttl=45s".into()],
            flags: serde_json::json!({}),
        })
        .unwrap();
        assert_eq!(s.redis_url, "redis://env:2");
        assert_eq!(s.timers.lease_ttl, Duration::from_secs(45));
        assert_eq!(s.master.known_adapters, ["a", "b"]);
        assert!(s.host.keep_workspaces);
        assert_eq!(
            source.origin("redis_url"),
            Origin::Environment("TRAINYARD_REDIS_URL".into())
        );
        assert_eq!(
            source.origin("timers.lease_ttl"),
            Origin::Flag("--set timers.lease_ttl".into())
        );
    }

    #[test]
    fn an_adapter_entry_may_set_a_default_progress_timeout_and_stalls_are_free_once() {
        let f = with_file(
            "[master]\nfree_stalled_retries = 2\n\n\
             [[host.adapters]]\npath = \"adapters/dist/python-trainer.wasm\"\n\
             programs = [\"python3\"]\nprogress_timeout = \"10m\"\n\n\
             [[host.adapters]]\npath = \"adapters/dist/noop.wasm\"\nprograms = [\"true\"]\n",
        );
        let (s, _) = Settings::load_from(Inputs {
            file: Some(f.path().to_path_buf()),
            ..Inputs::default()
        })
        .unwrap();
        assert_eq!(
            s.host.adapters[0].progress_timeout,
            Some(Duration::from_secs(600))
        );
        assert_eq!(s.host.adapters[1].progress_timeout, None);
        assert_eq!(s.master.free_stalled_retries, 2);
        assert_eq!(Settings::default().master.free_stalled_retries, 1);
        let bad = with_file("[[host.adapters]]\npath = \"a.wasm\"\nprogress_timeout = \"soon\"\n");
        let e = Settings::load_from(Inputs {
            file: Some(bad.path().to_path_buf()),
            ..Inputs::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("progress_timeout"), "{e}");
    }

    #[test]
    fn python_environments_are_configured_in_the_file_and_the_environment() {
        let f = with_file(
            "[host.python]\nfind_links = [\"/srv/wheels\"]\nno_index = true\n\n\
             [[host.adapters]]\npath = \"adapters/dist/cartpole.wasm\"\nprograms = [\"python3\"]\n\
             python = { requirements = [\"gymnasium>=1.0,<2\", \"numpy>=1.26\"] }\n",
        );
        let (s, _) = Settings::load_from(Inputs {
            file: Some(f.path().to_path_buf()),
            env: vec![
                ("TRAINYARD_HOST__PYTHON__CACHE_BYTES".into(), "1GiB".into()),
                ("TRAINYARD_HOST__PYTHON__BUILD_TIMEOUT".into(), "2m".into()),
                ("TRAINYARD_HOST__PYTHON__UV".into(), "/opt/uv/bin/uv".into()),
            ],
            ..Inputs::default()
        })
        .unwrap();
        let python = &s.host.python;
        assert_eq!(python.uv, "/opt/uv/bin/uv");
        assert_eq!(python.cache_bytes, Some(1 << 30));
        assert_eq!(python.build_timeout, Duration::from_secs(120));
        assert_eq!(python.find_links, [PathBuf::from("/srv/wheels")]);
        assert!(python.no_index && python.index_url.is_none());
        let wanted = s.host.adapters[0].python.as_ref().unwrap();
        assert_eq!(wanted.requirements, ["gymnasium>=1.0,<2", "numpy>=1.26"]);
        let defaults = Settings::default().host.python;
        assert_eq!(defaults.cache_bytes, Some(20 << 30));
        assert_eq!(defaults.build_timeout, Duration::from_secs(15 * 60));
    }

    #[test]
    fn an_invalid_value_from_the_environment_names_its_variable() {
        let err = Settings::load_from(Inputs {
            env: vec![("TRAINYARD_HOST__SLOTS".into(), "many".into())],
            file: Some(with_file("").path().to_path_buf()),
            ..Inputs::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("TRAINYARD_HOST__SLOTS"), "{err}");
    }

    #[test]
    fn a_set_flag_for_no_key_is_refused() {
        let err = Settings::load_from(Inputs {
            set: vec!["master.api_listn=x".into()],
            file: Some(with_file("").path().to_path_buf()),
            ..Inputs::default()
        })
        .unwrap_err()
        .to_string();
        assert_eq!(err, "--set master.api_listn=x: no key master.api_listn");
    }

    #[test]
    fn a_missing_explicit_file_is_an_error() {
        let err = load(
            Path::new("/nonexistent/trainyard.toml"),
            serde_json::json!({}),
        )
        .unwrap_err();
        assert!(matches!(err, SettingsError::Missing(_)));
    }
}
