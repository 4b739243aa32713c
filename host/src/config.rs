//! The host's settings, as the binary hands them over after merging
//! `config.toml`, the environment and flags.

use crate::containment::{AdapterContainment, ContainmentSettings};
use crate::python_env::{PythonRequirements, PythonSettings};
use crate::runtime::RuntimeConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::resources::HostCapacity;
use trainyard_proto::{HostId, Timers};

/// One adapter the host loads.
#[derive(Clone, Debug)]
pub struct AdapterConfig {
    /// The component (`.wasm`).
    pub path: PathBuf,
    /// Programs this adapter may launch: bare names (looked up on the
    /// host's PATH when the adapter loads) or absolute paths. The adapter
    /// must name one exactly as written here.
    pub programs: Vec<String>,
    /// Its trainers' network, extra paths and limits.
    pub containment: AdapterContainment,
    /// The Python environment its trainers run in, if any.
    pub python: Option<PythonRequirements>,
    /// How long its trainers may go without progress when their task sets
    /// no `progress_timeout_secs` ([`crate::attempt::stall`]).
    pub progress_timeout: Option<Duration>,
}

/// What to do when an adapter fails to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnAdapterError {
    /// Refuse to start.
    Refuse,
    /// Log it and start with the adapters that loaded.
    Skip,
}

#[derive(Clone, Debug)]
pub struct HostConfig {
    pub id: HostId,
    /// `host:port` of the master's host listener, or of several masters
    /// (one leads, the others stand by), comma separated: see
    /// [`crate::link::masters`], which reads it when the host starts.
    pub master: String,
    pub slots: u32,
    /// CPUs, memory and GPUs offered to tasks.
    pub resources: HostCapacity,
    /// The device files of each GPU offered: a trainer may open only those
    /// of the GPUs its attempt holds.
    pub gpu_files: BTreeMap<String, Vec<PathBuf>>,
    /// Task workspaces live under here.
    pub work_dir: PathBuf,
    /// How trainers are contained.
    pub containment: ContainmentSettings,
    pub redis_url: String,
    pub key_prefix: String,
    pub timers: Timers,
    pub cluster_secret: ClusterSecret,
    pub adapters: Vec<AdapterConfig>,
    pub on_adapter_error: OnAdapterError,
    pub runtime: RuntimeConfig,
    /// The `trainyard-supervise` binary.
    pub supervisor: PathBuf,
    /// Variables copied from the host's environment into every trainer's.
    pub pass_env: Vec<String>,
    /// Variables set in every trainer's environment.
    pub trainer_env: Vec<(String, String)>,
    /// This host's own credentials for an `s3://` artifact store (the master
    /// names the bucket, never a credential); the uploads sign with them,
    /// and no trainer or adapter ever sees them.
    pub artifact_credentials: Option<trainyard_artifacts::S3Credentials>,
    /// Largest checkpoint file the host captures and ships to the master.
    pub max_checkpoint_bytes: u64,
    /// Longest trainer output line handed to the adapter; stderr is cut into
    /// captured lines of this length too.
    pub max_line_bytes: usize,
    /// How much of the end of a trainer's stderr is kept.
    pub stderr_tail_bytes: usize,
    /// Progress is forwarded to the master at most this often per attempt,
    /// batching every event since the previous update (a checkpoint or a
    /// full batch at once).
    pub progress_interval: Duration,
    /// Keep workspaces after the attempt (for debugging) instead of deleting them.
    pub keep_workspaces: bool,
    /// How often the adapter files are looked at again for new, changed and
    /// removed ones ([`crate::adapters::reload`]); zero turns it off.
    pub watch_adapters: Duration,
    pub max_frame_bytes: usize,
    /// TLS to the master, or plain TCP when unset.
    pub tls: Option<HostTls>,
    /// Where to serve `/metrics`; off when unset.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The installer and package index of Python environments.
    pub python: PythonSettings,
    /// Where the host keeps the Python environments it builds; when unset,
    /// next to the compiled adapters (`runtime.cache_dir`).
    pub cache_dir: Option<PathBuf>,
}

/// How the host reaches the master over TLS.
#[derive(Clone, Debug)]
pub struct HostTls {
    /// The CA to check the master's certificate against (or none, for
    /// tests), and this host's own certificate for mutual TLS.
    pub client: trainyard_proto::tls::ClientTls,
    /// The name every master's certificate must carry; when unset, the
    /// host part of the address being dialled.
    pub server_name: Option<String>,
}

impl HostConfig {
    /// Settings for a host of the given id, offering the machine's CPUs and
    /// memory and no GPUs; tests and benchmarks adjust the rest.
    pub fn new(
        id: HostId,
        master: String,
        redis_url: String,
        secret: ClusterSecret,
        work_dir: PathBuf,
    ) -> Self {
        Self {
            id,
            master,
            slots: 2,
            gpu_files: BTreeMap::new(),
            resources: HostCapacity {
                cpus: crate::capacity::machine_cpus(),
                memory_bytes: crate::capacity::machine_memory(),
                gpus: vec![],
            },
            work_dir,
            containment: ContainmentSettings::default(),
            redis_url,
            key_prefix: String::new(),
            timers: Timers::default(),
            cluster_secret: secret,
            adapters: vec![],
            on_adapter_error: OnAdapterError::Refuse,
            runtime: RuntimeConfig::default(),
            supervisor: default_supervisor(),
            pass_env: vec!["PATH".into()],
            trainer_env: vec![],
            artifact_credentials: None,
            max_checkpoint_bytes: 8 << 20,
            max_line_bytes: 64 << 10,
            stderr_tail_bytes: 8 << 10,
            progress_interval: Duration::from_millis(250),
            keep_workspaces: false,
            watch_adapters: Duration::from_secs(2),
            max_frame_bytes: trainyard_proto::frame::DEFAULT_MAX_FRAME,
            tls: None,
            metrics_listen: None,
            python: PythonSettings::default(),
            cache_dir: None,
        }
    }
}

/// `trainyard-supervise` next to the running binary.
pub fn default_supervisor() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("trainyard-supervise")))
        .unwrap_or_else(|| PathBuf::from("trainyard-supervise"))
}

/// `[host.resources]`: what the host offers to tasks. What is left out is
/// found on the machine.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceSettings {
    /// CPUs offered; the CPUs this process may run on by default.
    pub cpus: Option<f64>,
    /// Memory offered, in bytes or with a unit ("64GiB"); all physical
    /// memory by default.
    #[serde(deserialize_with = "trainyard_proto::resources::memory_amount::deserialize")]
    pub memory: Option<u64>,
    /// `"auto"` (the GPUs `nvidia-smi` lists; none without it) or the
    /// devices' names.
    pub gpus: GpuSetting,
    /// The device files of each listed GPU (its `/dev` node and the
    /// driver's shared nodes): with Landlock on, a trainer may open only
    /// those of the GPUs its attempt holds. GPUs found by `nvidia-smi` get
    /// `/dev/nvidia<index>` and the NVIDIA driver's shared nodes.
    pub gpu_files: BTreeMap<String, Vec<PathBuf>>,
}

/// The NVIDIA driver's nodes every process using a GPU opens.
pub const NVIDIA_SHARED_FILES: &[&str] = &[
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
];

/// Which GPUs a host offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "GpuWords", into = "GpuWords")]
pub enum GpuSetting {
    /// Found with `nvidia-smi`.
    #[default]
    Auto,
    /// Named by the operator (tests and fleets without GPUs declare
    /// devices this way).
    Listed(Vec<String>),
}

/// How [`GpuSetting`] is written: `"auto"` or a list of names.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum GpuWords {
    Word(String),
    List(Vec<String>),
}

impl TryFrom<GpuWords> for GpuSetting {
    type Error = String;
    fn try_from(words: GpuWords) -> Result<Self, String> {
        match words {
            GpuWords::Word(w) if w == "auto" => Ok(GpuSetting::Auto),
            GpuWords::Word(w) => Err(format!(
                "gpus must be \"auto\" or a list of device names such as [\"0\", \"1\"], not {w:?}"
            )),
            GpuWords::List(names) => Ok(GpuSetting::Listed(names)),
        }
    }
}

impl From<GpuSetting> for GpuWords {
    fn from(g: GpuSetting) -> Self {
        match g {
            GpuSetting::Auto => GpuWords::Word("auto".into()),
            GpuSetting::Listed(names) => GpuWords::List(names),
        }
    }
}

impl ResourceSettings {
    /// The device files of each of `gpus` (the GPUs offered): as listed in
    /// `gpu_files`, or for GPUs `nvidia-smi` found, the NVIDIA nodes. Files
    /// listed for a GPU that is not offered are an error (a typo would
    /// otherwise keep a GPU's own trainer from opening it).
    pub fn gpu_files(&self, gpus: &[String]) -> Result<BTreeMap<String, Vec<PathBuf>>, String> {
        if let Some(stray) = self.gpu_files.keys().find(|g| !gpus.contains(g)) {
            return Err(format!(
                "host.resources.gpu_files names GPU {stray:?}, which this host does not offer (it offers: {})",
                gpus.join(", ")
            ));
        }
        let files = |gpu: &String| match (&self.gpus, self.gpu_files.get(gpu)) {
            (_, Some(listed)) => listed.clone(),
            (GpuSetting::Auto, None) => std::iter::once(format!("/dev/nvidia{gpu}"))
                .chain(NVIDIA_SHARED_FILES.iter().map(|f| f.to_string()))
                .map(PathBuf::from)
                .collect(),
            (GpuSetting::Listed(_), None) => vec![],
        };
        Ok(gpus.iter().map(|gpu| (gpu.clone(), files(gpu))).collect())
    }

    /// The capacity to offer: what is configured, the machine's for the rest.
    pub fn resolve(&self) -> HostCapacity {
        HostCapacity {
            cpus: self.cpus.unwrap_or_else(crate::capacity::machine_cpus),
            memory_bytes: self.memory.unwrap_or_else(crate::capacity::machine_memory),
            gpus: match &self.gpus {
                GpuSetting::Auto => crate::capacity::detect_gpus(),
                GpuSetting::Listed(names) => names.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(gpus: &[&str]) -> Vec<String> {
        gpus.iter().map(|g| g.to_string()).collect()
    }

    #[test]
    fn found_gpus_get_the_nvidia_nodes_and_listed_ones_their_listed_files() {
        let auto = ResourceSettings::default();
        let files = auto.gpu_files(&names(&["0", "3"])).unwrap();
        assert_eq!(files["3"][0], PathBuf::from("/dev/nvidia3"));
        assert!(files["3"].contains(&PathBuf::from("/dev/nvidiactl")));
        let listed = ResourceSettings {
            gpus: GpuSetting::Listed(names(&["a", "b"])),
            gpu_files: BTreeMap::from([("a".to_string(), vec![PathBuf::from("/srv/a")])]),
            ..ResourceSettings::default()
        };
        let files = listed.gpu_files(&names(&["a", "b"])).unwrap();
        assert_eq!(files["a"], [PathBuf::from("/srv/a")]);
        assert!(
            files["b"].is_empty(),
            "a listed GPU without files opens none"
        );
    }

    #[test]
    fn files_for_a_gpu_not_offered_are_refused_by_name() {
        let typo = ResourceSettings {
            gpus: GpuSetting::Listed(names(&["gpu0"])),
            gpu_files: BTreeMap::from([("gpu9".to_string(), vec![PathBuf::from("/dev/x")])]),
            ..ResourceSettings::default()
        };
        let refused = typo.gpu_files(&names(&["gpu0"])).unwrap_err();
        assert!(
            refused.contains("\"gpu9\"") && refused.contains("gpu0"),
            "{refused}"
        );
    }
}
