//! The TCP listener for hosts. It bounds the number of connections (a
//! stranger opening sockets cannot exhaust the master), and hands each
//! accepted socket to a session of its own.

use super::session;
use crate::scheduler::SchedulerHandle;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::tls::TlsAcceptor;
use trainyard_proto::Timers;

#[derive(Clone)]
pub struct ListenerConfig {
    pub secret: ClusterSecret,
    /// TLS for every connection, or plain TCP.
    pub tls: Option<TlsAcceptor>,
    /// Mutual TLS: a host's certificate must name its id.
    pub host_certificates: bool,
    pub timers: Timers,
    pub max_frame: usize,
    pub max_connections: usize,
    /// Where the hosts' log batches go, past the scheduler.
    pub logs: crate::logs::LogFeed,
    /// Where hosts put what attempts leave, told in the welcome.
    pub artifacts: Option<trainyard_proto::messages::ArtifactTarget>,
}

/// Accepts host connections until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    config: ListenerConfig,
    scheduler: SchedulerHandle,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let sessions = Arc::new(AtomicU64::new(1));
    let config = Arc::new(config);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "accepting a host connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%addr, limit = config.max_connections, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let id = sessions.fetch_add(1, Ordering::Relaxed);
        let (config, scheduler) = (config.clone(), scheduler.clone());
        tokio::spawn(async move {
            session::run(stream, addr, id, &config, scheduler).await;
            drop(permit);
        });
    }
}
