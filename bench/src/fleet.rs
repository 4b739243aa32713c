//! Light hosts: the host library started many times in this process. Each
//! is a whole host — its own TCP connection and handshake, its own lease
//! layer and Redis connection, its own agent and slots — sharing one adapter
//! runtime (one engine and instance pool), which is what a host process with
//! many slots would do too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainyard::cluster::Cluster;
use trainyard_host::config::{AdapterConfig, HostConfig};
use trainyard_host::link::connection::{AttemptObserver, ConnectionEvent};
use trainyard_host::runtime::{AdapterRuntime, RuntimeConfig};
use trainyard_host::RunningHost;
use trainyard_proto::HostId;

/// Connection events of every light host, by host index.
pub type Journal = Arc<Mutex<Vec<Vec<ConnectionEvent>>>>;

/// What a fleet runs.
pub struct FleetSpec {
    pub count: usize,
    pub slots: u32,
    /// Adapters each host carries, with their allowed programs.
    pub adapters: Vec<(PathBuf, Vec<String>)>,
    /// Under mutual TLS, the directory of each host's certificate and key
    /// (`host-<id>.pem`, `host-<id>-key.pem`, as `trainyard certs` names them).
    pub certificates: Option<PathBuf>,
}

impl FleetSpec {
    /// `count` hosts of `slots` slots each carrying the noop adapter, allowed
    /// no program, over plain TCP.
    pub fn noop(env: &super::env::BenchEnv, count: usize, slots: u32) -> Self {
        Self {
            count,
            slots,
            adapters: vec![(env.adapter("noop"), vec![])],
            certificates: None,
        }
    }
}

/// The id of the light host at `index`.
pub fn host_id(index: usize) -> String {
    format!("light-{index}")
}

/// Running light hosts.
pub struct Fleet {
    pub hosts: Vec<RunningHost>,
    pub journal: Journal,
}

impl Fleet {
    /// Starts `spec.count` hosts against the cluster's master and Redis.
    pub async fn start(cluster: &Cluster, spec: &FleetSpec) -> anyhow::Result<Self> {
        let settings = &cluster.settings;
        let secret = trainyard::secrets::cluster_secret(&settings.cluster, false)?;
        let runtime = AdapterRuntime::new(RuntimeConfig {
            max_instances: (spec.count as u32 * spec.slots + 8).min(10_000),
            cache_dir: Some(cluster.dir.join("cache")),
            ..RuntimeConfig::default()
        })?;
        let journal: Journal = Arc::new(Mutex::new(vec![vec![]; spec.count]));
        let mut hosts = Vec::with_capacity(spec.count);
        for i in 0..spec.count {
            let mut config = HostConfig::new(
                HostId::new(host_id(i))?,
                settings.host.master.clone(),
                settings.redis_url.clone(),
                secret.clone(),
                cluster.dir.join("light").join(i.to_string()),
            );
            config.key_prefix = settings.redis_key_prefix.clone();
            config.timers = settings.timers.clone();
            config.slots = spec.slots;
            config.supervisor = cluster.bins.supervisor.clone();
            config.tls = trainyard::tls::host(settings)?;
            if let (Some(tls), Some(dir)) = (config.tls.as_mut(), &spec.certificates) {
                let id = host_id(i);
                tls.client.identity = Some((
                    dir.join(format!("host-{id}.pem")),
                    dir.join(format!("host-{id}-key.pem")),
                ));
            }
            config.adapters = spec
                .adapters
                .iter()
                .map(|(path, programs)| AdapterConfig {
                    path: path.clone(),
                    programs: programs.clone(),
                    containment: Default::default(),
                    python: None,
                    progress_timeout: None,
                })
                .collect();
            let log = journal.clone();
            let observer: AttemptObserver = Arc::new(move |e| log.lock().unwrap()[i].push(e));
            hosts.push(trainyard_host::start(config, runtime.clone(), Some(observer)).await?);
        }
        Ok(Self { hosts, journal })
    }

    /// Each host's first connect attempt after `after`, as an offset from it.
    pub fn first_attempts_after(&self, after: Instant) -> Vec<Option<Duration>> {
        self.first_after(after, |e| match e {
            ConnectionEvent::Connecting { at } => Some(*at),
            _ => None,
        })
    }

    /// Each host's first welcome after `after`, as an offset from it.
    pub fn first_welcomes_after(&self, after: Instant) -> Vec<Option<Duration>> {
        self.first_after(after, |e| match e {
            ConnectionEvent::Connected { at } => Some(*at),
            _ => None,
        })
    }

    /// Each host's first event that `pick` times, after `after`.
    fn first_after(
        &self,
        after: Instant,
        pick: impl Fn(&ConnectionEvent) -> Option<Instant>,
    ) -> Vec<Option<Duration>> {
        self.journal
            .lock()
            .unwrap()
            .iter()
            .map(|events| {
                events
                    .iter()
                    .filter_map(&pick)
                    .find(|at| *at > after)
                    .map(|at| at.duration_since(after))
            })
            .collect()
    }

    pub async fn shutdown(self) {
        futures::future::join_all(
            self.hosts
                .into_iter()
                .map(|h| h.shutdown(Duration::from_secs(2))),
        )
        .await;
    }
}
