//! The trainyard master: it accepts tasks, keeps their state in the
//! database, dispatches them to worker hosts over TCP, and recovers them when
//! anything dies.
//!
//! # Layout
//! - [`model`]: tasks, attempts and hosts as plain data.
//! - [`placement`]: which host may run which task, and why a task waits.
//! - [`store`]: the task table through sqlx (SQLite or PostgreSQL).
//! - [`scheduler`]: the single writer of task state — queue, dispatch,
//!   reports, the recovery sweep.
//! - [`recovery`]: when anything dies — the sweep's and reports'
//!   decisions as pure functions, and the Redis reads (and fences) they
//!   rest on.
//! - [`stall`]: stalled trainers — what a STALLED attempt does to its
//!   task, how long a running attempt has been quiet.
//! - [`standing`]: whether a host takes new work — drain, quarantine and
//!   its probe — as pure functions.
//! - [`search`]: sweeps (hyperparameter searches), their ranking and early
//!   stopping.
//! - [`sessions`]: the host listener, handshake and per-connection sessions.
//! - [`access`]: teams, roles, tokens and adapter rules — who may do what.
//! - [`api`]: the HTTP API and the live event stream.
//! - [`artifacts`]: the artifact store hosts put checkpoints and outputs in.
//! - [`dashboard`]: the web dashboard's page and files, on the API's port.
//! - [`events`]: fan-out of task events.
//! - [`history`]: the stored progress history, and its bound.
//! - [`logs`]: the captured trainer and adapter lines, and their bound.
//! - [`leadership`]: standby masters on PostgreSQL — who leads, and
//!   stepping down.
//! - [`config`]: the master's settings.
//! - [`failpoints`]: fault injection, in builds for the tests only.

pub mod access;
pub mod api;
pub mod artifacts;
pub mod config;
pub mod dashboard;
pub mod events;
pub mod failpoints;
pub mod history;
pub mod leadership;
pub mod logs;
pub mod model;
pub mod placement;
pub mod recovery;
pub mod scheduler;
pub mod search;
pub mod sessions;
pub mod stall;
pub mod standing;
pub mod store;

use config::MasterConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use trainyard_proto::tls::TlsAcceptor;

/// Why the master could not start.
#[derive(Debug, thiserror::Error)]
pub enum MasterError {
    #[error("invalid timers: {0}")]
    Timers(#[from] trainyard_proto::timers::InvalidTimers),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("invalid Redis URL: {0}")]
    RedisUrl(redis::RedisError),
    #[error("TLS: {0}")]
    Tls(#[from] trainyard_proto::tls::TlsError),
    #[error("{0}")]
    Artifacts(std::io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A started master. Dropping it does not stop it; call [`RunningMaster::stop`].
pub struct RunningMaster {
    /// Where hosts connect.
    pub hosts_addr: SocketAddr,
    /// Where the HTTP API listens.
    pub api_addr: SocketAddr,
    pub scheduler: scheduler::SchedulerHandle,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl RunningMaster {
    /// Stops accepting, lets the scheduler finish its turn, and waits.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }

    /// Waits until the master stops by itself (it does not, short of a bug).
    pub async fn wait(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The master's two listeners, bound.
struct Listeners {
    hosts: std::net::TcpListener,
    api: std::net::TcpListener,
    hosts_addr: SocketAddr,
    api_addr: SocketAddr,
}

impl Listeners {
    async fn bind(config: &MasterConfig) -> Result<Listeners, MasterError> {
        let bind = |addr: SocketAddr| async move {
            let listen = |source| MasterError::Listen { addr, source };
            let listener = TcpListener::bind(addr).await.map_err(listen)?;
            let bound = listener.local_addr().map_err(listen)?;
            Ok::<_, MasterError>((listener.into_std().map_err(listen)?, bound))
        };
        let (hosts, hosts_addr) = bind(config.hosts_listen).await?;
        let (api, api_addr) = bind(config.api_listen).await?;
        Ok(Listeners {
            hosts,
            api,
            hosts_addr,
            api_addr,
        })
    }

    /// A handle on each listener for one phase (standby, then leader):
    /// connections waiting to be accepted stay queued between phases.
    fn take(&self) -> std::io::Result<(TcpListener, TcpListener)> {
        Ok((
            TcpListener::from_std(self.hosts.try_clone()?)?,
            TcpListener::from_std(self.api.try_clone()?)?,
        ))
    }
}

/// What entitles this master to run: the SQLite file lock, or the lead
/// among the masters of a PostgreSQL database.
enum Tenure {
    Lock(store::MasterLock),
    Leader {
        held: store::Held,
        fence: Arc<store::Fence>,
        ttl: std::time::Duration,
    },
}

impl Tenure {
    /// Resolves when the master must stop, with why.
    async fn lost(self) -> String {
        match self {
            // The file lock is the process's until it dies.
            Tenure::Lock(_lock) => std::future::pending().await,
            Tenure::Leader { held, fence, ttl } => leadership::hold(held, fence, ttl).await,
        }
    }

    fn term(&self) -> u64 {
        match self {
            Tenure::Lock(_) => 0,
            Tenure::Leader { fence, .. } => u64::try_from(fence.term).unwrap_or(0),
        }
    }
}

/// TLS for the host listener and the API, read before anything else so a
/// bad file stops the start with nothing taken.
fn acceptors(
    config: &MasterConfig,
) -> Result<(Option<TlsAcceptor>, Option<TlsAcceptor>), MasterError> {
    let hosts = config.tls.as_ref().map(|t| t.acceptor()).transpose()?;
    let api = config
        .tls
        .as_ref()
        .map(|t| {
            trainyard_proto::tls::ServerTls {
                client_ca: None,
                ..t.clone()
            }
            .acceptor()
        })
        .transpose()?;
    Ok((hosts, api))
}

/// Starts a master. On SQLite it takes the database's file lock first (a
/// second master refuses to start). On PostgreSQL it binds its listeners
/// and stands by until it is elected leader, telling hosts and API clients
/// who leads meanwhile. Then it connects to Redis, reconciles, and starts
/// the scheduler, the host listener and the API. The master stops by
/// itself if it loses the lock or the lead.
pub async fn start(config: MasterConfig) -> Result<RunningMaster, MasterError> {
    config.timers.validate()?;
    let (hosts_tls, api_tls) = acceptors(&config)?;
    let artifacts = config
        .artifacts
        .as_ref()
        .map(|a| artifacts::Artifacts::open(a, config.cluster_secret.clone()))
        .transpose()
        .map_err(MasterError::Artifacts)?
        .map(Arc::new);
    let (store, tenure, listeners) = enter(&config, &hosts_tls, &api_tls).await?;
    tracing::info!(backend = ?store.backend(), "task store ready");
    let term = tenure.term();
    let (stop, stopped) = watch::channel(false);
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    // The lead is watched from the moment it is won: loading and
    // reconciling may take longer than its lease.
    let mut tasks = JoinSet::new();
    let lost_stop = stop.clone();
    let lost_stopped = until_stopped();
    tasks.spawn(async move {
        tokio::select! {
            reason = tenure.lost() => {
                tracing::error!(%reason, "stopping: this master no longer leads");
                let _ = lost_stop.send(true);
            }
            _ = lost_stopped => {}
        }
    });
    let redis = Arc::new(
        trainyard_proto::redis_link::RedisLink::new(&config.redis_url, config.timers.redis_timeout)
            .map_err(MasterError::RedisUrl)?,
    );
    let keys = trainyard_proto::keys::Keys::new(config.key_prefix.clone());
    if term > 0 {
        leadership::announce(&redis, &keys, term).await;
    }
    let events = events::Events::new(16 * 1024);
    let thinner = history::Thinner::new(store.clone(), &events);
    let (log_recorder, log_feed) = logs::Recorder::new(store.clone());
    let (scheduler, handle) = scheduler::Scheduler::start(
        store.clone(),
        redis,
        keys,
        events.clone(),
        log_feed.clone(),
        scheduler::SchedulerConfig {
            timers: config.timers.clone(),
            max_batch: config.max_batch,
            known_adapters: config.known_adapters.clone(),
            reserve_after: config.reserve_after,
            versions: config.unpinned_version,
            term,
            quarantine: config.quarantine.clone(),
            free_stalled_retries: config.free_stalled_retries,
        },
    )
    .await?;

    let (hosts_listener, api_listener) =
        listeners.take().map_err(|source| MasterError::Listen {
            addr: config.hosts_listen,
            source,
        })?;
    let (hosts_addr, api_addr) = (listeners.hosts_addr, listeners.api_addr);
    let api_url = leadership::candidate(&config, hosts_addr, api_addr).api_url;
    let artifact_target = artifacts.as_ref().map(|a| a.target(&api_url));
    if let Some(a) = &artifacts {
        tracing::info!(store = %a.spec, at = %a.store.describe(), "artifact store ready");
    }

    tasks.spawn(scheduler.run(until_stopped()));
    tasks.spawn(thinner.run(until_stopped()));
    tasks.spawn(log_recorder.run(until_stopped()));
    tasks.spawn(sessions::serve(
        hosts_listener,
        listener_config(&config, hosts_tls, log_feed.clone(), artifact_target),
        handle.clone(),
        until_stopped(),
    ));
    tasks.spawn(
        search::supervisor::Supervisor {
            store: store.clone(),
            scheduler: handle.clone(),
            events: events.clone(),
        }
        .run(until_stopped()),
    );
    let app = api::router(api_state(
        &config, store, &handle, events, log_feed, artifacts,
    )?);
    let served = serve_api(
        api_listener,
        api_tls,
        app,
        config.api_listen,
        until_stopped(),
    )?;
    tasks.spawn(served);
    let transport = match &config.tls {
        None => "plain TCP",
        Some(t) if t.client_ca.is_some() => "TLS, hosts present certificates naming their id",
        Some(_) => "TLS",
    };
    tracing::info!(%hosts_addr, %api_addr, transport, "master listening");
    Ok(RunningMaster {
        hosts_addr,
        api_addr,
        scheduler: handle,
        stop,
        tasks,
    })
}

/// Serves `app` on `listener` (over TLS when given) until `shutdown`
/// resolves; the future to spawn.
fn serve_api(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: axum::Router,
    addr: SocketAddr,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, MasterError> {
    let served = match tls {
        None => tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(shutdown)
            .await
        }),
        Some(tls) => {
            let listener = api::tls::TlsListener::new(listener, tls)
                .map_err(|source| MasterError::Listen { addr, source })?;
            tokio::spawn(async move {
                axum::serve(
                    listener,
                    app.into_make_service_with_connect_info::<api::tls::PeerAddr>(),
                )
                .with_graceful_shutdown(shutdown)
                .await
            })
        }
    };
    Ok(async move {
        match served.await {
            Ok(Err(e)) => tracing::error!(error = %e, "API server failed"),
            Err(e) => tracing::error!(error = %e, "API server panicked"),
            Ok(Ok(())) => {}
        }
    })
}

/// Stands by until elected leader: tells hosts who leads and serves reads
/// on the API meanwhile.
async fn stand_by(
    config: &MasterConfig,
    listeners: &Listeners,
    store: &store::Store,
    hosts_tls: &Option<TlsAcceptor>,
    api_tls: &Option<TlsAcceptor>,
) -> Result<store::Held, MasterError> {
    let me = leadership::candidate(config, listeners.hosts_addr, listeners.api_addr);
    let (leader, leader_seen) = watch::channel(None);
    let (stop, stopped) = watch::channel(false);
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let (hosts, api) = listeners.take().map_err(|source| MasterError::Listen {
        addr: config.hosts_listen,
        source,
    })?;
    let mut tasks = JoinSet::new();
    tasks.spawn(leadership::serve_hosts(
        hosts,
        hosts_tls.clone(),
        leader_seen.clone(),
        config.timers.handshake_timeout,
        config.max_connections,
        until_stopped(),
    ));
    let app = api::standby::router(api::standby::StandbyState {
        store: store.clone(),
        leader: leader_seen,
        gate: gate(config, store.clone()),
    });
    tasks.spawn(serve_api(
        api,
        api_tls.clone(),
        app,
        config.api_listen,
        until_stopped(),
    )?);
    tracing::info!(id = %me.id, hosts = %me.hosts_addr, api = %me.api_url, "campaigning for leadership");
    let held =
        leadership::campaign(&config.database_url, &me, config.leader_ttl, store, &leader).await;
    let _ = stop.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(held)
}

/// Takes what entitles this master to run: the SQLite file lock, or on
/// PostgreSQL the lead (standing by until elected), with its listeners
/// bound and its store fenced by its term.
async fn enter(
    config: &MasterConfig,
    hosts_tls: &Option<TlsAcceptor>,
    api_tls: &Option<TlsAcceptor>,
) -> Result<(store::Store, Tenure, Listeners), MasterError> {
    let entered = match store::backend_of(&config.database_url) {
        Some(store::Backend::Postgres) => {
            // Listening only once the database answers: a master cut off
            // from it refuses connections, and hosts try the next at once.
            let store =
                store::Store::connect_leading(&config.database_url, config.leader_ttl).await?;
            let listeners = Listeners::bind(config).await?;
            let held = stand_by(config, &listeners, &store, hosts_tls, api_tls).await?;
            let (fenced, fence) = store.fenced(held.term());
            tracing::info!(term = held.term(), "this master leads");
            let tenure = Tenure::Leader {
                held,
                fence,
                ttl: config.leader_ttl,
            };
            (fenced, tenure, listeners)
        }
        _ => {
            let lock = store::MasterLock::acquire(&config.database_url).await?;
            let store = store::Store::connect(&config.database_url).await?;
            let listeners = Listeners::bind(config).await?;
            (store, Tenure::Lock(lock), listeners)
        }
    };
    Ok(entered)
}

fn listener_config(
    config: &MasterConfig,
    tls: Option<TlsAcceptor>,
    logs: logs::LogFeed,
    artifacts: Option<trainyard_proto::messages::ArtifactTarget>,
) -> sessions::ListenerConfig {
    sessions::ListenerConfig {
        secret: config.cluster_secret.clone(),
        tls,
        host_certificates: config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        timers: config.timers.clone(),
        max_frame: config.max_frame_bytes,
        max_connections: config.max_connections,
        logs,
        artifacts,
    }
}

/// Who an API request acts as, from the settings and the stored tokens.
fn gate(config: &MasterConfig, store: store::Store) -> api::auth::Gate {
    api::auth::Gate {
        store,
        legacy_token: config.api_token.clone().into(),
        open_reads: config.open_reads,
        https: config.tls.is_some(),
    }
}

fn api_state(
    config: &MasterConfig,
    store: store::Store,
    scheduler: &scheduler::SchedulerHandle,
    events: events::Events,
    logs: logs::LogFeed,
    artifacts: Option<Arc<artifacts::Artifacts>>,
) -> Result<api::AppState, MasterError> {
    let redis_probe =
        trainyard_proto::redis_link::RedisLink::new(&config.redis_url, api::health::PROBE_TIMEOUT)
            .map_err(MasterError::RedisUrl)?;
    let access = gate(config, store.clone());
    Ok(api::AppState {
        store,
        placement: scheduler.placement(),
        scheduler: scheduler.clone(),
        events,
        logs,
        gate: access,
        adapter_rules: Arc::new(config.adapter_rules.clone()),
        default_max_attempts: config.default_max_attempts,
        redis_probe: Arc::new(redis_probe),
        sweep_interval: config.timers.sweep_interval,
        artifacts,
    })
}
