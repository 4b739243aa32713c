//! Standby masters on PostgreSQL: several masters run against one
//! database and one Redis; one leads and does everything a master does,
//! the others stand by, warm (connected, migrations checked), until the
//! leader is gone.
//!
//! - A standby tries to take the lead every [`campaign_interval`]
//!   ([`crate::store::Seat::campaign`]); meanwhile it tells hosts who leads
//!   ([`serve_hosts`]) and serves reads on its API
//!   ([`crate::api::standby`]).
//! - Elected, it announces its term in Redis, then starts exactly as a lone
//!   master does: loads the tasks, reconciles with Redis, and listens.
//! - A leader confirms its term every [`confirm_interval`]. It steps down
//!   — stops, closing its host connections and its API — when a
//!   confirmation fails, when a write finds a newer term, or when it has
//!   gone [`step_down_after`] without one (paused, cut off from the
//!   database), which is before the database server ends its session and
//!   lets a standby in. The process then stands by again.
//!
//! Nothing here is needed for safety: the term fences every write (the
//! store) and every fence in Redis (`sweep`), so a deposed leader that has
//! not noticed yet changes nothing. Stepping down is what keeps it from
//! trying.

use crate::config::MasterConfig;
use crate::store::{Candidate, Fence, Held, Leader, Seat, Store};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::codec::Framed;
use trainyard_proto::frame::MessageCodec;
use trainyard_proto::messages::{HostMessage, MasterMessage};
use trainyard_proto::tls::TlsAcceptor;

/// Default of `master.leader_ttl`: how long a leader that stopped
/// answering keeps the lead before a standby may take it.
pub const DEFAULT_LEADER_TTL: Duration = Duration::from_secs(10);

/// How often a standby tries to take the lead.
pub fn campaign_interval(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(100), Duration::from_millis(500))
}

/// How often a leader confirms its term.
pub fn confirm_interval(ttl: Duration) -> Duration {
    ttl / 4
}

/// How long after its last confirmation began a leader steps down if no
/// other confirmation has succeeded: well before the server ends its idle
/// session, `ttl` after that confirmation ended.
pub fn step_down_after(ttl: Duration) -> Duration {
    ttl * 3 / 4
}

/// Whether a leader whose last successful confirmation began at
/// `confirmed` must step down at `now`.
pub fn must_step_down(confirmed: Instant, now: Instant, ttl: Duration) -> bool {
    now >= confirmed + step_down_after(ttl)
}

/// What this master tells the others about itself when it leads.
pub fn candidate(config: &MasterConfig, hosts: SocketAddr, api: SocketAddr) -> Candidate {
    let machine = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "master".into());
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let reachable = |addr: SocketAddr| {
        if addr.ip().is_unspecified() {
            format!("{machine}:{}", addr.port())
        } else {
            addr.to_string()
        }
    };
    Candidate {
        id: format!(
            "{machine}-{}-{:04x}",
            std::process::id(),
            rand::random::<u16>()
        ),
        hosts_addr: config
            .advertise_hosts
            .clone()
            .unwrap_or_else(|| reachable(hosts)),
        api_url: config
            .advertise_api
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{}", reachable(api))),
    }
}

/// Campaigns until elected, publishing who leads meanwhile.
pub async fn campaign(
    url: &str,
    me: &Candidate,
    ttl: Duration,
    store: &Store,
    leader: &watch::Sender<Option<Leader>>,
) -> Held {
    let mut seat: Option<Seat> = None;
    let mut announced: Option<Option<String>> = None;
    loop {
        if seat.is_none() {
            match Seat::open(url).await {
                Ok(s) => seat = Some(s),
                Err(e) => tracing::warn!(error = %e, "cannot reach the database to campaign"),
            }
        }
        if let Some(s) = seat.take() {
            match s.campaign(me, ttl).await {
                Ok(Ok(held)) => return held,
                Ok(Err(s)) => seat = Some(s),
                Err(e) => tracing::warn!(error = %e, "campaigning for leadership failed"),
            }
        }
        if let Ok(now) = store.leader().await {
            let who = now.as_ref().map(|l| l.id.clone());
            if announced.as_ref() != Some(&who) {
                match &now {
                    Some(l) => {
                        tracing::info!(leader = %l.id, term = l.term, hosts = %l.hosts_addr, api = %l.api_url, "standing by: another master leads")
                    }
                    None => tracing::info!("standing by: no master leads; campaigning"),
                }
                announced = Some(who);
            }
            leader.send_replace(now);
        }
        tokio::time::sleep(campaign_interval(ttl)).await;
    }
}

/// Holds the lead until it is lost; returns why.
pub async fn hold(mut held: Held, fence: Arc<Fence>, ttl: Duration) -> String {
    let mut confirmed = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(confirm_interval(ttl)) => {}
            _ = fence.deposed.notified() => {
                held.resign().await;
                return "a write found that another master's term has begun".into();
            }
        }
        let started = Instant::now();
        if must_step_down(confirmed, started, ttl) {
            held.resign().await;
            return format!(
                "no confirmation of the term for {:?} (this process was paused or cut off)",
                started - confirmed
            );
        }
        let deadline = confirmed + step_down_after(ttl);
        match tokio::time::timeout_at(deadline, held.confirm()).await {
            Ok(Ok(())) => confirmed = started,
            Ok(Err(e)) => {
                held.resign().await;
                return format!("could not confirm the term: {e}");
            }
            Err(_) => {
                held.resign().await;
                return "the database did not confirm the term in time".into();
            }
        }
    }
}

/// Announces a new leader's term in Redis, so that fences of older terms
/// are refused from now on. Best effort: every fence this leader writes
/// announces it too.
pub async fn announce(
    redis: &trainyard_proto::redis_link::RedisLink,
    keys: &trainyard_proto::keys::Keys,
    term: u64,
) {
    let announced = async {
        let mut con = redis.connection().await?;
        crate::recovery::leases::announce_term(&mut con, keys, term).await
    };
    match announced.await {
        Ok(now) if now > term => {
            tracing::warn!(term, newer = now, "Redis names a newer leader's term")
        }
        Ok(_) => tracing::debug!(term, "term announced in Redis"),
        Err(e) => tracing::warn!(error = %e, "cannot announce the term in Redis yet"),
    }
}

/// A standby's host listener: every host that connects is told who leads,
/// in place of the challenge, and the connection closed.
pub async fn serve_hosts(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    leader: watch::Receiver<Option<Leader>>,
    timeout: Duration,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    // As many at once as the leader's listener takes: each is closed after
    // one message or `timeout`, but a flood must not grow without bound.
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(max_connections));
    loop {
        let (stream, addr) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a host connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%addr, limit = max_connections, "connection limit reached; closing new connection");
            continue;
        };
        let hint = leader.borrow().as_ref().map(|l| l.hosts_addr.clone());
        let tls = tls.clone();
        tokio::spawn(async move {
            let told = tokio::time::timeout(timeout, tell_leader(stream, tls.as_ref(), hint)).await;
            if !matches!(told, Ok(Ok(()))) {
                tracing::debug!(%addr, "could not tell a host who leads");
            }
            drop(permit);
        });
    }
}

async fn tell_leader(
    stream: tokio::net::TcpStream,
    tls: Option<&TlsAcceptor>,
    leader: Option<String>,
) -> std::io::Result<()> {
    use futures::SinkExt;
    let transport = crate::sessions::transport::open(stream, tls).await?;
    let codec = MessageCodec::<HostMessage, MasterMessage>::new(1024);
    let mut frames = Framed::new(transport.stream, codec);
    frames
        .send(MasterMessage::Standby { leader })
        .await
        .map_err(std::io::Error::other)?;
    frames.close().await.map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS acceptor with a fresh self-signed certificate.
    fn acceptor(dir: &std::path::Path) -> TlsAcceptor {
        let issued = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert, issued.cert.pem()).unwrap();
        std::fs::write(&key, issued.signing_key.serialize_pem()).unwrap();
        let tls = trainyard_proto::tls::ServerTls {
            cert,
            key,
            client_ca: None,
        };
        tls.acceptor().unwrap()
    }

    #[tokio::test]
    async fn a_standby_closes_host_connections_past_its_limit() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_leader, seen) = watch::channel(None);
        let handshake = Duration::from_secs(60);
        let served = serve_hosts(
            listener,
            Some(acceptor(dir.path())),
            seen,
            handshake,
            1,
            std::future::pending(),
        );
        tokio::spawn(served);
        // Says nothing: its TLS handshake holds the one place until the
        // handshake timeout.
        let _stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut refused = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(20), refused.read(&mut byte))
            .await
            .expect("the connection past the limit is closed, not left to its handshake");
        assert_eq!(read.unwrap_or(0), 0, "closed without a word");
    }

    #[test]
    fn a_leader_steps_down_before_the_server_would_end_its_session() {
        let ttl = Duration::from_secs(10);
        let t0 = Instant::now();
        assert!(!must_step_down(t0, t0 + Duration::from_millis(7_499), ttl));
        assert!(must_step_down(t0, t0 + Duration::from_millis(7_500), ttl));
        assert!(step_down_after(ttl) < ttl);
        // Several confirmations fit before stepping down.
        assert!(confirm_interval(ttl) * 2 < step_down_after(ttl));
    }

    #[test]
    fn standbys_campaign_often_enough_to_lead_within_a_second_of_the_ttl() {
        for ttl in [1, 3, 10, 60].map(Duration::from_secs) {
            let every = campaign_interval(ttl);
            assert!(every <= Duration::from_millis(500), "{ttl:?}: {every:?}");
            assert!(every >= Duration::from_millis(100), "{ttl:?}: {every:?}");
        }
    }

    #[test]
    fn a_candidate_advertises_what_it_listens_on_unless_told_otherwise() {
        let mut config = MasterConfig::local(
            "postgres://x/y",
            "redis://x",
            trainyard_proto::auth::ClusterSecret::new(b"0123456789abcdef-test".to_vec()).unwrap(),
            "t",
        );
        let hosts: SocketAddr = "127.0.0.1:7700".parse().unwrap();
        let api: SocketAddr = "0.0.0.0:7701".parse().unwrap();
        let me = candidate(&config, hosts, api);
        assert_eq!(me.hosts_addr, "127.0.0.1:7700");
        assert!(me.api_url.starts_with("http://") && me.api_url.ends_with(":7701"));
        assert!(!me.api_url.contains("0.0.0.0"), "{}", me.api_url);

        config.advertise_hosts = Some("m1.example:7700".into());
        config.advertise_api = Some("https://m1.example:7701".into());
        let me = candidate(&config, hosts, api);
        assert_eq!(me.hosts_addr, "m1.example:7700");
        assert_eq!(me.api_url, "https://m1.example:7701");
    }
}
