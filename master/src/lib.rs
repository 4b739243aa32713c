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
//! - [`recovery`]: the sweep's and reports' decisions as pure functions.
//! - [`sweep`], [`reconcile`]: the Redis reads (and fences) they rest on.
//! - [`search`]: sweeps (hyperparameter searches), their ranking and early
//!   stopping.
//! - [`sessions`]: the host listener, handshake and per-connection sessions.
//! - [`api`]: the HTTP API and the live event stream.
//! - [`dashboard`]: the web dashboard's page and files, on the API's port.
//! - [`events`]: fan-out of task events.
//! - [`history`]: the stored progress history, and its bound.
//! - [`logs`]: the captured trainer and adapter lines, and their bound.
//! - [`config`]: the master's settings.
//! - [`failpoints`]: fault injection, in builds for the tests only.

pub mod api;
pub mod config;
pub mod dashboard;
pub mod events;
pub mod failpoints;
pub mod history;
pub mod logs;
pub mod model;
pub mod placement;
pub mod reconcile;
pub mod recovery;
pub mod scheduler;
pub mod search;
pub mod sessions;
pub mod store;
pub mod sweep;

use config::MasterConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

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

/// Takes the database's master lock, connects to the database (running
/// migrations) and Redis, reconciles, and starts the scheduler, the host
/// listener and the API. The master stops by itself if it loses the lock to
/// another master.
pub async fn start(config: MasterConfig) -> Result<RunningMaster, MasterError> {
    config.timers.validate()?;
    // Certificates are read before anything else, so a bad file stops the
    // start with nothing taken.
    let hosts_tls = config.tls.as_ref().map(|t| t.acceptor()).transpose()?;
    let api_tls = config
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
    let lock = store::MasterLock::acquire(&config.database_url).await?;
    let store = store::Store::connect(&config.database_url).await?;
    tracing::info!(backend = ?store.backend(), "task store ready");
    let redis = Arc::new(
        trainyard_proto::redis_link::RedisLink::new(&config.redis_url, config.timers.redis_timeout)
            .map_err(MasterError::RedisUrl)?,
    );
    let keys = trainyard_proto::keys::Keys::new(config.key_prefix.clone());
    let events = events::Events::new(16 * 1024);
    let recorder = history::Recorder::new(store.clone(), &events);
    let (log_recorder, log_feed) = logs::Recorder::new(store.clone());
    let (scheduler, handle) = scheduler::Scheduler::start(
        store.clone(),
        redis,
        keys,
        events.clone(),
        scheduler::SchedulerConfig {
            timers: config.timers.clone(),
            max_batch: config.max_batch,
            known_adapters: config.known_adapters.clone(),
            reserve_after: config.reserve_after,
            versions: config.unpinned_version,
        },
    )
    .await?;

    let hosts_listener = TcpListener::bind(config.hosts_listen)
        .await
        .map_err(|source| MasterError::Listen {
            addr: config.hosts_listen,
            source,
        })?;
    let api_listener = TcpListener::bind(config.api_listen)
        .await
        .map_err(|source| MasterError::Listen {
            addr: config.api_listen,
            source,
        })?;
    let hosts_addr = hosts_listener
        .local_addr()
        .map_err(|source| MasterError::Listen {
            addr: config.hosts_listen,
            source,
        })?;
    let api_addr = api_listener
        .local_addr()
        .map_err(|source| MasterError::Listen {
            addr: config.api_listen,
            source,
        })?;

    let (stop, stopped) = watch::channel(false);
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let mut tasks = JoinSet::new();
    let lock_stop = stop.clone();
    let lock_stopped = until_stopped();
    tasks.spawn(async move {
        tokio::select! {
            reason = lock.lost() => {
                tracing::error!(%reason, "stopping: this master lost its lock on the database");
                let _ = lock_stop.send(true);
            }
            _ = lock_stopped => {}
        }
    });
    tasks.spawn(scheduler.run(until_stopped()));
    tasks.spawn(recorder.run(until_stopped()));
    tasks.spawn(log_recorder.run(until_stopped()));
    tasks.spawn(sessions::serve(
        hosts_listener,
        sessions::ListenerConfig {
            secret: config.cluster_secret.clone(),
            tls: hosts_tls,
            host_certificates: config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
            timers: config.timers.clone(),
            max_frame: config.max_frame_bytes,
            max_connections: config.max_connections,
            logs: log_feed.clone(),
        },
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
    let redis_probe =
        trainyard_proto::redis_link::RedisLink::new(&config.redis_url, api::health::PROBE_TIMEOUT)
            .map_err(MasterError::RedisUrl)?;
    let app = api::router(api::AppState {
        store,
        placement: handle.placement(),
        scheduler: handle.clone(),
        events,
        logs: log_feed,
        api_token: config.api_token.clone().into(),
        default_max_attempts: config.default_max_attempts,
        redis_probe: Arc::new(redis_probe),
        sweep_interval: config.timers.sweep_interval,
    });
    let api_stopped = until_stopped();
    let served = match api_tls {
        None => tokio::spawn(async move {
            axum::serve(api_listener, app)
                .with_graceful_shutdown(api_stopped)
                .await
        }),
        Some(tls) => {
            let listener = api::tls::TlsListener::new(api_listener, tls).map_err(|source| {
                MasterError::Listen {
                    addr: config.api_listen,
                    source,
                }
            })?;
            tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(api_stopped)
                    .await
            })
        }
    };
    tasks.spawn(async move {
        match served.await {
            Ok(Err(e)) => tracing::error!(error = %e, "API server failed"),
            Err(e) => tracing::error!(error = %e, "API server panicked"),
            Ok(Ok(())) => {}
        }
    });
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
