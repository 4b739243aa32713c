//! Configuration: built-in defaults, then `config.toml`, then `TRAINYARD_…`
//! environment variables (sections joined by `__`, e.g.
//! `TRAINYARD_MASTER__API_LISTEN`), then command-line flags — merged by
//! figment. Unknown keys are errors, so a typo never silently falls back to a
//! default.

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use trainyard_proto::Timers;

/// The file read when no `--config` is given, if it exists.
pub const DEFAULT_FILE: &str = "config.toml";

/// Top-level keys; environment variables naming anything else (such as
/// `TRAINYARD_TEST_REDIS_URL`) are not configuration.
const TOP_LEVEL: [&str; 9] = [
    "data_dir",
    "redis_url",
    "redis_key_prefix",
    "database_url",
    "cluster",
    "api",
    "master",
    "host",
    "timers",
];

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
    pub timers: Timers,
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
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostSection {
    pub id: Option<String>,
    pub master: String,
    pub slots: u32,
    pub work_dir: PathBuf,
    pub cache_dir: Option<PathBuf>,
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
    pub max_frame_bytes: usize,
    pub adapter_memory_bytes: u64,
    #[serde(with = "humantime_serde")]
    pub adapter_call_timeout: Duration,
    pub adapter_instances: u32,
    pub adapter_log_records: u32,
    pub adapter_log_bytes: usize,
    pub resources: trainyard_host::config::ResourceSettings,
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
            timers: Timers::default(),
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
        }
    }
}

impl Default for HostSection {
    fn default() -> Self {
        Self {
            id: None,
            master: "127.0.0.1:7700".into(),
            slots: 2,
            work_dir: "data/work".into(),
            cache_dir: Some("data/cache".into()),
            on_adapter_error: OnAdapterError::Refuse,
            supervisor: None,
            pass_env: vec!["PATH".into()],
            trainer_env: Default::default(),
            max_checkpoint_bytes: 8 << 20,
            max_line_bytes: 64 << 10,
            stderr_tail_bytes: 8 << 10,
            progress_interval: Duration::from_millis(250),
            keep_workspaces: false,
            max_frame_bytes: trainyard_proto::frame::DEFAULT_MAX_FRAME,
            adapter_memory_bytes: 64 << 20,
            adapter_call_timeout: Duration::from_secs(5),
            adapter_instances: 64,
            adapter_log_records: 1000,
            adapter_log_bytes: 1 << 20,
            resources: Default::default(),
            adapters: vec![
                AdapterEntry {
                    path: "adapters/dist/python-trainer.wasm".into(),
                    programs: vec!["python3".into()],
                },
                AdapterEntry {
                    path: "adapters/dist/noop.wasm".into(),
                    programs: vec!["true".into()],
                },
            ],
        }
    }
}

/// Where the configuration came from, for the start-up log.
#[derive(Debug, Clone)]
pub struct Source {
    pub file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
    #[error("invalid configuration: {0}")]
    Invalid(#[from] Box<figment::Error>),
}

impl Settings {
    /// Merges defaults, the config file (`path`, else `config.toml` if it
    /// exists), the environment, and `flags` (a nested object of the flags the
    /// user gave).
    pub fn load(
        path: Option<&Path>,
        flags: serde_json::Value,
    ) -> Result<(Settings, Source), SettingsError> {
        let file = match path {
            Some(p) if !p.exists() => return Err(SettingsError::Missing(p.to_path_buf())),
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(DEFAULT_FILE)).filter(|p| p.exists()),
        };
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(f) = &file {
            figment = figment.merge(Toml::file_exact(f));
        }
        figment = figment
            .merge(Env::prefixed("TRAINYARD_").split("__").filter(|key| {
                TOP_LEVEL
                    .iter()
                    .any(|top| key.as_str() == *top || key.as_str().starts_with(&format!("{top}.")))
            }))
            .merge(Serialized::defaults(flags));
        let settings: Settings = figment.extract().map_err(Box::new)?;
        Ok((settings, Source { file }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_file(contents: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, contents.as_bytes()).unwrap();
        f
    }

    #[test]
    fn the_shipped_config_file_is_valid_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
        let (from_file, _) = Settings::load(Some(&path), serde_json::json!({})).unwrap();
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
        let err = Settings::load(Some(f.path()), serde_json::json!({}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("api_listn"), "{err}");
    }

    #[test]
    fn flags_override_the_file() {
        let f = with_file("[host]\nslots = 3\nmaster = \"10.0.0.1:7700\"\n");
        let (s, _) =
            Settings::load(Some(f.path()), serde_json::json!({"host": {"slots": 5}})).unwrap();
        assert_eq!(s.host.slots, 5);
        assert_eq!(s.host.master, "10.0.0.1:7700");
    }

    #[test]
    fn durations_are_human_text() {
        let f = with_file("[timers]\nlease_ttl = \"3s\"\nheartbeat_interval = \"300ms\"\n");
        let (s, _) = Settings::load(Some(f.path()), serde_json::json!({})).unwrap();
        assert_eq!(s.timers.lease_ttl, Duration::from_secs(3));
        assert_eq!(s.timers.heartbeat_interval, Duration::from_millis(300));
    }

    #[test]
    fn a_missing_explicit_file_is_an_error() {
        let err = Settings::load(
            Some(Path::new("/nonexistent/trainyard.toml")),
            serde_json::json!({}),
        )
        .unwrap_err();
        assert!(matches!(err, SettingsError::Missing(_)));
    }
}
