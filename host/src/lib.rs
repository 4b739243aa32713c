//! The trainyard worker host: it connects to the master, runs each task it
//! is given through a sandboxed WebAssembly task adapter, supervises the
//! trainer process the adapter asks for, and owns the task's lease in Redis.
//!
//! # Layout
//! - [`config`]: the host's settings.
//! - [`link`]: the connection to the master — connect, handshake, backoff,
//!   which of the configured masters to dial.
//! - [`agent`]: the slots, the master's orders, heartbeats, unacknowledged reports.
//! - [`capacity`]: the CPUs, memory and GPUs offered, and which attempt holds which.
//! - [`attempt`]: one attempt from lease to report; its body runs without
//!   the lease layer too, for [`local`]: one attempt on this machine with
//!   no master, Redis or database (`trainyard adapter run`).
//! - [`lease`]: the lease layer, the only writer of lease keys, and its
//!   renewal each heartbeat.
//! - [`adapters`]: the adapters carried, by name and version; reloading
//!   them; whether their programs can run; their launch plans checked
//!   against the operator's policy.
//! - [`runtime`]: the wasmtime embedding that loads and calls adapters.
//! - [`conformance`]: the suite `trainyard adapter check` runs against an
//!   adapter's fresh instances.
//! - [`process`]: launching and supervising trainer processes.
//! - [`containment`]: what confines each trainer (cgroup, Landlock, network,
//!   user, limits).
//! - [`python_env`]: Python environments the host builds, caches and
//!   shares read-only between the attempts of adapters that ask for them.
//! - [`workspace`]: the per-attempt workspace directory.
//! - [`artifacts`]: the checkpoints and outputs an attempt leaves, moved by
//!   the host into the cluster's artifact store, and the checkpoint a new
//!   attempt resumes from, fetched and checked.
//! - [`logs`]: trainer and adapter lines captured per attempt, bounded,
//!   until the connection ships them to the master.
//! - [`metrics`]: the host's `/metrics`, on `host.metrics_listen`.

pub mod adapters;
pub mod agent;
pub mod artifacts;
pub mod attempt;
pub mod capacity;
pub mod config;
pub mod conformance;
pub mod containment;
pub mod lease;
pub mod link;
pub mod local;
pub mod logs;
pub mod metrics;
pub mod process;
pub mod python_env;
pub mod runtime;
pub mod workspace;

use adapters::{carried, plan, reload, runnable};
use config::{HostConfig, OnAdapterError};
use lease::renewer;
use link::{connection, masters};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot set up the artifact store's client: {0}")]
    Artifacts(String),
    #[error("invalid timers: {0}")]
    Timers(#[from] trainyard_proto::timers::InvalidTimers),
    #[error("cannot start the adapter runtime: {0}")]
    Runtime(#[from] runtime::RuntimeError),
    #[error("adapter {path} cannot be loaded: {reason}")]
    Adapter { path: String, reason: String },
    #[error("no adapter loaded; a host with nothing to run is refused")]
    NoAdapters,
    #[error("two files carry adapter {name} {version}: {first} and {second}; remove one")]
    DuplicateAdapter {
        name: String,
        version: String,
        first: String,
        second: String,
    },
    #[error("invalid Redis URL: {0}")]
    RedisUrl(redis::RedisError),
    #[error("TLS: {0}")]
    Tls(#[from] trainyard_proto::tls::TlsError),
    #[error(transparent)]
    Masters(#[from] masters::MasterListError),
    #[error("cannot create the work directory {path}: {source}")]
    WorkDir {
        path: String,
        source: std::io::Error,
    },
    #[error("the trainer supervisor {0} does not exist; build it (`cargo build`) or set host.supervisor")]
    Supervisor(String),
    #[error(
        "host.slots = {slots} is more than host.adapter_instances = {instances}: every running \
         attempt holds one adapter instance, so a full host could not start its last attempts; \
         raise host.adapter_instances to at least {slots} or lower host.slots"
    )]
    PoolTooSmall { slots: u32, instances: u32 },
    #[error("invalid [host.resources]: {0}")]
    Resources(String),
    #[error("adapter entry {path}: {reason}")]
    AdapterEntry { path: String, reason: String },
    #[error(transparent)]
    Containment(#[from] containment::ContainmentError),
    #[error(transparent)]
    Python(#[from] python_env::SetupError),
    #[error("cannot serve metrics on {addr} (host.metrics_listen): {source}")]
    MetricsListen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Loads every configured adapter (each file of an entry that names a
/// directory), applying the operator's policy for the ones that fail.
pub async fn load_adapters(
    runtime: &runtime::AdapterRuntime,
    config: &HostConfig,
    runner: &runnable::Runner,
) -> Result<carried::Carried, HostError> {
    let mut adapters = carried::Carried::default();
    let mut watched_dir = false;
    for spec in &config.adapters {
        watched_dir |= spec.path.is_dir();
        let files = reload::entry_files(&spec.path).map_err(|e| HostError::Adapter {
            path: spec.path.display().to_string(),
            reason: format!("cannot list the directory: {e}"),
        })?;
        for file in files {
            let path = file.display().to_string();
            match load_adapter(runtime, spec, &file, runner).await {
                Ok(adapter) => {
                    let info = adapter.loaded.info();
                    tracing::info!(
                        adapter = %info.name,
                        version = %info.version,
                        kinds = ?info.kinds,
                        programs = ?adapter.allowlist.names(),
                        %path,
                        "adapter loaded"
                    );
                    let (name, version) = (info.name.clone(), info.version.clone());
                    if let Err(kept) = adapters.insert(adapter) {
                        return Err(HostError::DuplicateAdapter {
                            name,
                            version,
                            first: kept.loaded.path().display().to_string(),
                            second: path,
                        });
                    }
                }
                Err(reason) if config.on_adapter_error == OnAdapterError::Skip => {
                    tracing::error!(%path, %reason, "adapter not loaded; starting without it");
                }
                Err(reason) => return Err(HostError::Adapter { path, reason }),
            }
        }
    }
    // A directory may be filled after start-up (hot reload).
    if adapters.is_empty() && !watched_dir {
        return Err(HostError::NoAdapters);
    }
    Ok(adapters)
}

/// Loads one component with its entry's allowlist, containment and Python
/// environment: at start-up and when its file changes. Every program on the
/// allowlist must be one `runner`, the trainers' user, can run.
pub async fn load_adapter(
    runtime: &runtime::AdapterRuntime,
    spec: &config::AdapterConfig,
    file: &std::path::Path,
    runner: &runnable::Runner,
) -> Result<attempt::Adapter, String> {
    let path_env = std::env::var_os("PATH");
    let allowlist =
        plan::Allowlist::resolve(&spec.programs, path_env.as_deref()).map_err(|e| e.to_string())?;
    for program in allowlist.names() {
        let executable = allowlist.executable(&program).expect("a listed program");
        runnable::check(&program, executable, runner, path_env.as_deref())
            .map_err(|e| e.to_string())?;
    }
    let loaded = runtime.load(file).await.map_err(|e| e.to_string())?;
    Ok(attempt::Adapter {
        loaded,
        allowlist: Arc::new(allowlist),
        containment: Arc::new(spec.containment.clone()),
        python: spec.python.clone().map(Arc::new),
        progress_timeout: spec.progress_timeout,
    })
}

/// Refuses a host whose trainer supervisor is missing.
pub fn check_supervisor(config: &HostConfig) -> Result<(), HostError> {
    if config.supervisor.exists() {
        Ok(())
    } else {
        Err(HostError::Supervisor(
            config.supervisor.display().to_string(),
        ))
    }
}

/// The Python environments, when an adapter entry asks for one.
pub fn open_python_envs(
    config: &HostConfig,
    wanted: bool,
    metrics: &metrics::HostMetrics,
) -> Result<Option<python_env::PythonEnvs>, HostError> {
    if !wanted {
        return Ok(None);
    }
    Ok(Some(python_env::PythonEnvs::open(
        &config.python,
        config
            .cache_dir
            .as_deref()
            .or(config.runtime.cache_dir.as_deref()),
        config.id.as_str(),
        metrics.clone(),
    )?))
}

/// A started host.
pub struct RunningHost {
    agent: agent::AgentHandle,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    enforcement: containment::Enforcement,
    /// Ended before the host's cgroup directory is removed.
    sandboxes: Option<Arc<process::SandboxPool>>,
}

impl RunningHost {
    /// Stops every running attempt (reported as interrupted, so the master
    /// requeues it at once), waits up to `timeout` for them to end and for
    /// the master to acknowledge their reports, and stops.
    pub async fn shutdown(self, timeout: Duration) {
        let (done, finished) = oneshot::channel();
        let asked = self.agent.tx.send(agent::Event::Shutdown { done }).await;
        if asked.is_ok() && tokio::time::timeout(timeout, finished).await.is_err() {
            tracing::warn!(
                "attempts did not stop, or their reports were not acknowledged, in time"
            );
        }
        for t in self.tasks {
            t.abort();
        }
        if let Some(sandboxes) = &self.sandboxes {
            sandboxes.close();
        }
        self.enforcement.release();
    }
}

/// Starts a host: adapters, lease renewal, the agent and the connection.
pub async fn start(
    config: HostConfig,
    runtime: runtime::AdapterRuntime,
    observer: Option<connection::AttemptObserver>,
) -> Result<RunningHost, HostError> {
    config.timers.validate()?;
    let instances = runtime.config().max_instances;
    if config.slots > instances {
        return Err(HostError::PoolTooSmall {
            slots: config.slots,
            instances,
        });
    }
    config
        .resources
        .validate()
        .map_err(|e| HostError::Resources(e.to_string()))?;
    let masters = masters::MasterAddrs::parse(&config.master)?;
    for adapter in &config.adapters {
        containment::seccomp::check_allowed(&adapter.containment.allow_syscalls).map_err(
            |reason| HostError::AdapterEntry {
                path: adapter.path.display().to_string(),
                reason,
            },
        )?;
    }
    check_supervisor(&config)?;
    workspace::prepare_base(&config.work_dir).map_err(|source| HostError::WorkDir {
        path: config.work_dir.display().to_string(),
        source,
    })?;
    let tls = config
        .tls
        .as_ref()
        .map(|t| master_tls(t, &masters))
        .transpose()?;
    let enforcement = containment::Enforcement::probe(
        &config.containment,
        &cgroup_dir_name(&config),
        &config.supervisor,
        &config.work_dir,
    )?
    .with_gpu_files(config.gpu_files.clone());
    // How the files looked before loading, so a change during the load is
    // seen by the first look of the watcher.
    let seen = reload::scan(&config.adapters);
    let runner = enforcement.runner();
    let adapters = load_adapters(&runtime, &config, &runner).await?;
    let metrics = metrics::HostMetrics::default();
    // By entry, not by what loaded: a file may come later (hot reload).
    let wanted = config.adapters.iter().any(|a| a.python.is_some());
    let python = open_python_envs(&config, wanted, &metrics)?;
    let metrics_listener = match config.metrics_listen {
        None => None,
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| HostError::MetricsListen { addr, source })?,
        ),
    };
    let redis = Arc::new(
        trainyard_proto::redis_link::RedisLink::new(&config.redis_url, config.timers.redis_timeout)
            .map_err(HostError::RedisUrl)?,
    );
    let keys = trainyard_proto::keys::Keys::new(config.key_prefix.clone());
    let lease = lease::LeaseLayer::new(redis, keys, config.id.clone(), &config.timers);
    let book = Arc::new(renewer::LeaseBook::default());
    let contact = Arc::new(renewer::Contact::new());
    let config = Arc::new(config);
    let log_book = Arc::new(logs::LogBook::default());
    let sandboxes = (config.containment.prepared_sandboxes == containment::Switch::On).then(|| {
        process::SandboxPool::new(
            config.supervisor.clone(),
            config.slots as usize,
            metrics.clone(),
        )
    });
    let api_tls = config.tls.as_ref().map(|t| t.client.config()).transpose()?;
    let (shipper, artifact_target) = artifacts::Shipper::new(
        config.id.clone(),
        config.cluster_secret.clone(),
        api_tls,
        config.artifact_credentials.clone(),
    )
    .map_err(HostError::Artifacts)?;
    let env = attempt::AttemptEnv {
        lease: lease.clone(),
        book: book.clone(),
        host: attempt::HostEnv {
            logs: log_book.clone(),
            base_env: Arc::new(base_env(&config)),
            config: config.clone(),
            enforcement: Arc::new(enforcement.clone()),
            metrics: metrics.clone(),
            python,
            spares: Arc::new(workspace::Spares::new(config.slots as usize)),
            sandboxes: sandboxes.clone(),
            artifacts: Some(shipper),
        },
    };
    let ledger = capacity::Ledger::new(config.resources.clone());
    let watched = adapters.clone();
    let (agent, handle) = agent::Agent::new(config.id.clone(), config.slots, env, adapters, ledger);
    let connection = connection::ConnectionConfig {
        host: config.id.clone(),
        masters,
        slots: config.slots,
        capacity: config.resources.clone(),
        secret: config.cluster_secret.clone(),
        timers: config.timers.clone(),
        max_frame: config.max_frame_bytes,
        tls,
        containment: enforcement.layers(),
        logs: log_book,
        artifacts: Some(artifact_target),
    };
    tracing::info!(
        host = %config.id,
        master = %config.master,
        slots = config.slots,
        cpus = config.resources.cpus,
        memory_bytes = config.resources.memory_bytes,
        gpus = ?config.resources.gpus,
        containment = ?enforcement.layers(),
        backoff = %connection::describe_backoff(&config.timers),
        "host starting"
    );
    let t = &config.timers;
    let mut tasks = vec![
        tokio::spawn(agent.run(t.heartbeat_interval, t.report_resend_interval)),
        tokio::spawn(renewer::run(
            lease,
            book,
            contact.clone(),
            t.heartbeat_interval,
            t.lease_ttl,
            t.effective_margin(),
        )),
        tokio::spawn(connection::run(
            connection,
            handle.clone(),
            contact,
            observer,
        )),
    ];
    if !config.watch_adapters.is_zero() {
        let (config, agent) = (config.clone(), handle.clone());
        tasks.push(tokio::spawn(async move {
            reload::run(runtime, config, seen, &watched, agent, runner).await
        }));
    }
    if let Some(listener) = metrics_listener {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving metrics");
        }
        tasks.push(tokio::spawn(metrics::serve(listener, metrics)));
    }
    Ok(RunningHost {
        agent: handle,
        tasks,
        enforcement,
        sandboxes,
    })
}

/// This host's directory under the cgroup parent: its id, and its key
/// prefix when it has one, so hosts of different clusters on one machine
/// never clear each other's attempts.
fn cgroup_dir_name(config: &HostConfig) -> String {
    let id = config.id.as_str();
    let prefix = containment::cgroup::name_part(&config.key_prefix);
    if prefix.is_empty() {
        id.to_string()
    } else {
        format!("{prefix}.{id}")
    }
}

/// The environment every trainer starts from: the variables the operator
/// passes through from the host's own environment, then those it sets.
pub fn base_env(config: &HostConfig) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = config
        .pass_env
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| (name.clone(), v)))
        .collect();
    for (name, value) in &config.trainer_env {
        env.retain(|(n, _)| n != name);
        env.push((name.clone(), value.clone()));
    }
    env
}

/// The connector and expected names for TLS to the masters; certificate
/// files are read now, and every address's name checked, so a bad one
/// stops the start.
fn master_tls(
    tls: &config::HostTls,
    masters: &masters::MasterAddrs,
) -> Result<connection::MasterTls, trainyard_proto::tls::TlsError> {
    use trainyard_proto::tls::{server_name_of, ServerCheck};
    let server_name = tls.server_name.as_deref().map(server_name_of).transpose()?;
    if server_name.is_none() {
        for addr in masters.as_slice() {
            server_name_of(addr)?;
        }
    }
    if matches!(tls.client.server, ServerCheck::Insecure) {
        tracing::warn!(
            master = %masters,
            "INSECURE: the master's TLS certificate is not verified (tls.insecure_skip_verify); \
             anyone on the network path can pose as the master. For tests only."
        );
    }
    Ok(connection::MasterTls {
        connector: tls.client.connector()?,
        server_name,
    })
}
