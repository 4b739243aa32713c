//! The host's connection to the master: connect, handshake, carry messages,
//! and on any failure try the next configured master, or wait out the
//! backoff and start over — with state built fresh for every connection
//! (codec, outbox, session id), so nothing of a dead connection leaks into
//! the next. Which address is dialled when is [`crate::link::masters`]'s choice; a
//! standby master answers with `Standby` in place of the challenge.
//!
//! The backoff resets only once the master has welcomed the host and proved
//! it knows the cluster secret; a master that accepts TCP connections but is
//! not ready (or an impostor) leaves the delay growing. It is slept only
//! once every configured master has been tried.
//!
//! Over TLS the host checks the master's certificate first, and both proofs
//! of the handshake are bound to the TLS session (its exporter value), so a
//! handshake relayed by a machine in the middle fails.

use crate::agent::{AgentHandle, Event};
use crate::lease::renewer::Contact;
use crate::link::backoff::Backoff;
use crate::link::masters::{MasterAddrs, MasterChoice, Outcome, Step};
use crate::logs::{LogBook, SHIP_EVERY};
use futures::stream::SplitSink;
use futures::{SinkExt, StreamExt};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use tokio_util::either::Either;
use trainyard_proto::auth::{nonce, ClusterSecret};
use trainyard_proto::frame::MessageCodec;
use trainyard_proto::messages::{Hello, HostMessage, MasterMessage};
use trainyard_proto::resources::HostCapacity;
use trainyard_proto::tls::rustls::pki_types::ServerName;
use trainyard_proto::tls::{channel_binding, client, server_name_of, TlsConnector, TlsError};
use trainyard_proto::{HostId, Timers, PROTOCOL_VERSION};

type MasterStream = Either<TcpStream, client::TlsStream<TcpStream>>;
type MasterFrames = Framed<MasterStream, MessageCodec<MasterMessage, HostMessage>>;

/// TLS to the master: who to trust, what to present, which name to expect.
#[derive(Clone)]
pub struct MasterTls {
    pub connector: TlsConnector,
    /// The name every master's certificate must carry (`tls.server_name`);
    /// when unset, the host part of the address being dialled.
    pub server_name: Option<ServerName<'static>>,
}

impl MasterTls {
    /// The name the certificate of the master at `addr` must carry.
    pub fn server_name_for(&self, addr: &str) -> Result<ServerName<'static>, TlsError> {
        match &self.server_name {
            Some(name) => Ok(name.clone()),
            None => server_name_of(addr),
        }
    }
}

/// What the connection loop needs.
pub struct ConnectionConfig {
    pub host: HostId,
    /// The masters to dial, in order (`host.master`).
    pub masters: MasterAddrs,
    pub slots: u32,
    pub capacity: HostCapacity,
    pub secret: ClusterSecret,
    pub timers: Timers,
    pub max_frame: usize,
    /// TLS, or plain TCP when unset.
    pub tls: Option<MasterTls>,
    /// The containment layers the host enforces.
    pub containment: Vec<String>,
    /// The attempts' captured lines, shipped when nothing else waits.
    pub logs: Arc<LogBook>,
    /// Told where the artifact store is by each welcome.
    pub artifacts:
        Option<tokio::sync::watch::Sender<Option<trainyard_proto::messages::ArtifactTarget>>>,
}

/// Observers of connection attempts (tests measure reconnect spread with it).
pub type AttemptObserver = Arc<dyn Fn(ConnectionEvent) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// A TCP connect to the master is about to be tried.
    Connecting { at: Instant },
    /// The master welcomed the host.
    Connected { at: Instant },
    /// The connection ended (or never completed).
    Lost { at: Instant },
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("TLS handshake with the master failed: {0}")]
    Tls(std::io::Error),
    #[error("the master refused this host's TLS certificate: {0}")]
    CertificateRefused(std::io::Error),
    #[error("the master refused this host: {0}")]
    Refused(String),
    #[error("the master did not prove it knows the cluster secret")]
    Impostor,
    #[error("handshake failed: {0}")]
    Protocol(String),
    #[error("handshake timed out")]
    Timeout,
    /// Not an error of the master's: it is a standby, and names the leader
    /// when one leads.
    #[error("the master is a standby")]
    Standby { leader: Option<String> },
}

/// How one try at a master ended, owning what [`Outcome`] borrows.
enum Ended {
    Failed,
    Standby(Option<String>),
    Lost,
}

impl Ended {
    fn outcome(&self) -> Outcome<'_> {
        match self {
            Ended::Failed => Outcome::Failed,
            Ended::Standby(leader) => Outcome::Standby {
                leader: leader.as_deref(),
            },
            Ended::Lost => Outcome::Lost,
        }
    }
}

/// Keeps the host connected until the process ends.
pub async fn run(
    config: ConnectionConfig,
    agent: AgentHandle,
    contact: Arc<Contact>,
    observer: Option<AttemptObserver>,
) {
    let t = &config.timers;
    let mut backoff = Backoff::new(t.reconnect_initial, t.reconnect_max, t.reconnect_jitter);
    let mut choice = MasterChoice::new(config.masters.clone());
    let mut session: u64 = 0;
    let notify = |e: ConnectionEvent| {
        if let Some(o) = &observer {
            o(e)
        }
    };
    loop {
        session += 1;
        let master = choice.current().to_string();
        notify(ConnectionEvent::Connecting { at: Instant::now() });
        tracing::debug!(%master, session, "connecting to the master");
        let ended =
            match tokio::time::timeout(t.handshake_timeout, handshake(&config, &agent, &master))
                .await
            {
                Ok(Ok(frames)) => {
                    backoff.reset();
                    contact.heard();
                    notify(ConnectionEvent::Connected { at: Instant::now() });
                    tracing::info!(%master, "connected to the master");
                    serve(frames, session, &config, &agent, &contact).await;
                    tracing::warn!(%master, "connection to the master lost");
                    Ended::Lost
                }
                Ok(Err(e)) => failed(&master, e),
                Err(_) => failed(&master, HandshakeError::Timeout),
            };
        notify(ConnectionEvent::Lost { at: Instant::now() });
        match choice.after(ended.outcome()) {
            Step::Now => {
                tracing::debug!(master = choice.current(), "trying the next master");
            }
            Step::Backoff => {
                let delay = backoff.next_delay(&mut rand::rng());
                tracing::info!(
                    delay_ms = delay.as_millis() as u64,
                    master = choice.current(),
                    "reconnecting after backoff"
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Logs why a try at `master` ended without a welcome.
fn failed(master: &str, e: HandshakeError) -> Ended {
    match e {
        HandshakeError::Standby { leader } => {
            match &leader {
                Some(leader) => {
                    tracing::info!(master, %leader, "this master is a standby; it names the leader")
                }
                None => tracing::warn!(master, "this master is a standby and no master leads"),
            }
            return Ended::Standby(leader);
        }
        HandshakeError::Refused(reason) => {
            tracing::error!(master, %reason, "the master refused this host");
        }
        e @ (HandshakeError::Tls(_) | HandshakeError::CertificateRefused(_)) => {
            tracing::error!(master, error = %e, "could not connect to the master over TLS")
        }
        e => tracing::warn!(master, error = %e, "could not connect to the master"),
    }
    Ended::Failed
}

/// Connects to the master at `master` and completes the handshake.
async fn handshake(
    config: &ConnectionConfig,
    agent: &AgentHandle,
    master: &str,
) -> Result<MasterFrames, HandshakeError> {
    let (stream, channel) = open(config, master).await?;
    let mut frames = Framed::new(stream, MessageCodec::new(config.max_frame));
    let challenge = match frames.next().await {
        Some(Ok(MasterMessage::Challenge(c))) => c,
        Some(Ok(MasterMessage::Refused { reason })) => return Err(HandshakeError::Refused(reason)),
        // A standby sends this in place of the challenge, then closes.
        Some(Ok(MasterMessage::Standby { leader })) => {
            return Err(HandshakeError::Standby { leader })
        }
        Some(Ok(other)) => {
            return Err(HandshakeError::Protocol(format!(
                "expected a challenge, got {}",
                other.kind()
            )))
        }
        // With TLS 1.3 the master checks the host's certificate after the
        // host has finished its side: a refusal arrives as an alert here.
        Some(Err(trainyard_proto::frame::FrameError::Io(e))) if refused_certificate(&e) => {
            return Err(HandshakeError::CertificateRefused(e))
        }
        Some(Err(e)) => return Err(HandshakeError::Protocol(e.to_string())),
        None => {
            return Err(HandshakeError::Protocol(
                "the master closed the connection".into(),
            ))
        }
    };
    if challenge.protocol != PROTOCOL_VERSION {
        return Err(HandshakeError::Protocol(format!(
            "the master speaks protocol {}, this host {PROTOCOL_VERSION}",
            challenge.protocol
        )));
    }
    let (reply, state) = oneshot::channel();
    agent
        .tx
        .send(Event::Handshaking { reply })
        .await
        .map_err(|_| HandshakeError::Protocol("host agent stopped".into()))?;
    let state = state
        .await
        .map_err(|_| HandshakeError::Protocol("host agent stopped".into()))?;
    let host_nonce = nonce();
    let proof = config.secret.host_proof(
        &challenge.nonce,
        &host_nonce,
        config.host.as_str(),
        &channel,
    );
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        host_id: config.host.clone(),
        slots: config.slots,
        capacity: config.capacity.clone(),
        adapters: state.adapters,
        running: state.running,
        nonce: host_nonce.clone(),
        proof,
        agent: format!("trainyard-host {}", env!("CARGO_PKG_VERSION")),
        containment: config.containment.clone(),
    };
    frames
        .send(HostMessage::Hello(hello))
        .await
        .map_err(|e| HandshakeError::Protocol(e.to_string()))?;
    match frames.next().await {
        Some(Ok(MasterMessage::Welcome(w))) => {
            if config.secret.verify_master(
                &challenge.nonce,
                &host_nonce,
                config.host.as_str(),
                &channel,
                &w.proof,
            ) {
                if let Some(told) = &config.artifacts {
                    told.send_replace(w.artifacts);
                }
                Ok(frames)
            } else {
                Err(HandshakeError::Impostor)
            }
        }
        Some(Ok(MasterMessage::Refused { reason })) => Err(HandshakeError::Refused(reason)),
        Some(Ok(other)) => Err(HandshakeError::Protocol(format!(
            "expected welcome, got {}",
            other.kind()
        ))),
        Some(Err(e)) => Err(HandshakeError::Protocol(e.to_string())),
        None => Err(HandshakeError::Protocol(
            "the master closed the connection during the handshake".into(),
        )),
    }
}

/// A TCP connection to `master`, over TLS when configured (checking the
/// certificate for the name of this address), with the TLS session's
/// channel binding (empty over plain TCP).
async fn open(
    config: &ConnectionConfig,
    master: &str,
) -> Result<(MasterStream, Vec<u8>), HandshakeError> {
    let stream = TcpStream::connect(master)
        .await
        .map_err(HandshakeError::Connect)?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = &config.tls else {
        return Ok((Either::Left(stream), Vec::new()));
    };
    let name = tls
        .server_name_for(master)
        .map_err(|e| HandshakeError::Tls(std::io::Error::other(e)))?;
    let stream = tls
        .connector
        .connect(name, stream)
        .await
        .map_err(HandshakeError::Tls)?;
    let channel = channel_binding(stream.get_ref().1)
        .map_err(|e| HandshakeError::Tls(std::io::Error::other(e)))?;
    Ok((Either::Right(stream), channel))
}

/// Whether a read failed because the master's TLS layer sent an alert
/// refusing this host's certificate.
fn refused_certificate(e: &std::io::Error) -> bool {
    use trainyard_proto::tls::rustls::Error;
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Error>())
        .is_some_and(|e| matches!(e, Error::AlertReceived(_)))
}

/// Carries messages until the connection fails or goes silent.
async fn serve(
    frames: MasterFrames,
    session: u64,
    config: &ConnectionConfig,
    agent: &AgentHandle,
    contact: &Contact,
) {
    let (outbox, mut outgoing) = mpsc::channel::<HostMessage>(4096);
    if agent
        .tx
        .send(Event::Connected { session, outbox })
        .await
        .is_err()
    {
        return;
    }
    let (mut sink, mut stream) = frames.split();
    let writer = write(&mut sink, &mut outgoing, &config.logs);
    let idle = config.timers.idle_timeout;
    let reader = async {
        loop {
            match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => {
                    tracing::warn!(
                        idle_ms = idle.as_millis() as u64,
                        "master silent for longer than the idle timeout"
                    );
                    break;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "bad frame from the master");
                    break;
                }
                Ok(Some(Ok(message))) => {
                    contact.heard();
                    if agent.tx.send(Event::FromMaster(message)).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = writer => {}
        _ = reader => {}
    }
    let _ = agent.tx.send(Event::Disconnected { session }).await;
}

/// Writes the agent's messages to the master, and the attempts' log
/// batches ([`crate::logs`]) when no message waits: at most one batch per
/// attempt every [`SHIP_EVERY`], and an attempt's remaining lines just
/// before its report. Returns when the agent drops the outbox or a write
/// fails.
async fn write(
    sink: &mut SplitSink<MasterFrames, HostMessage>,
    outgoing: &mut mpsc::Receiver<HostMessage>,
    book: &LogBook,
) {
    // Taken but not yet written, in order; a waiting message goes first.
    let mut queued = VecDeque::new();
    let mut ship = tokio::time::interval(SHIP_EVERY);
    ship.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            biased;
            message = outgoing.recv() => {
                let Some(message) = message else { break };
                if let HostMessage::Report(report) = &message {
                    // The attempt's last lines reach the master before its
                    // end does.
                    let last = book.take_all(report.attempt);
                    queued.extend(last.into_iter().map(HostMessage::Logs));
                    queued.push_back(message);
                    continue;
                }
                message
            }
            _ = std::future::ready(()), if !queued.is_empty() => match queued.pop_front() {
                Some(message) => message,
                None => continue,
            },
            _ = ship.tick() => {
                queued.extend(book.take_due().into_iter().map(HostMessage::Logs));
                continue;
            }
        };
        // Messages that wait go out in one write: flushed once nothing
        // more waits, never held back behind nothing.
        let written = match sink.feed(message).await {
            Ok(()) if queued.is_empty() && outgoing.is_empty() => sink.flush().await,
            other => other,
        };
        if written.is_err() {
            break;
        }
    }
}

/// The delay before `n`-th reconnect attempts would be, for display.
pub fn describe_backoff(t: &Timers) -> String {
    format!(
        "{} doubling to {} (±{:.0} %)",
        humanize(t.reconnect_initial),
        humanize(t.reconnect_max),
        t.reconnect_jitter * 100.0
    )
}

fn humanize(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::net::TcpListener;

    /// The names of the listeners dialled, in order.
    type Seen = Arc<Mutex<Vec<&'static str>>>;

    /// A listener that records which addresses were dialled, in order; a
    /// standby's sends `Standby { leader }` first, the others just hold the
    /// connection.
    async fn listener(
        name: &'static str,
        standby: Option<Option<String>>,
        seen: Seen,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let mut held = vec![];
            while let Ok((socket, _)) = listener.accept().await {
                seen.lock().unwrap().push(name);
                let mut frames = Framed::new(
                    socket,
                    MessageCodec::<HostMessage, MasterMessage>::new(1 << 20),
                );
                if let Some(leader) = &standby {
                    let _ = frames
                        .send(MasterMessage::Standby {
                            leader: leader.clone(),
                        })
                        .await;
                } else {
                    held.push(frames);
                }
            }
        });
        (addr, task)
    }

    fn config(masters: &str) -> ConnectionConfig {
        let timers = Timers {
            // A backoff would outlast the test: every hop below is immediate.
            reconnect_initial: Duration::from_secs(3600),
            reconnect_max: Duration::from_secs(3600),
            ..Timers::default()
        };
        ConnectionConfig {
            host: HostId::new("h1".to_string()).unwrap(),
            masters: MasterAddrs::parse(masters).unwrap(),
            slots: 1,
            capacity: HostCapacity::default(),
            secret: ClusterSecret::new(ClusterSecret::generate_hex()).unwrap(),
            timers,
            max_frame: 1 << 20,
            tls: None,
            containment: vec![],
            logs: Arc::new(LogBook::default()),
            artifacts: None,
        }
    }

    /// Runs a host's connection loop over `masters` until two of the
    /// listeners have been dialled (or 5 s passed); returns which, in order.
    async fn first_two_dialled(masters: &str, seen: &Seen) -> Vec<&'static str> {
        let (tx, _rx) = mpsc::channel(8);
        let host = tokio::spawn(run(
            config(masters),
            AgentHandle { tx },
            Arc::new(Contact::new()),
            None,
        ));
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        host.abort();
        let dialled = seen.lock().unwrap().clone();
        dialled
    }

    #[tokio::test]
    async fn a_standbys_hint_is_dialled_next_skipping_the_addresses_between() {
        let seen = Arc::new(Mutex::new(vec![]));
        let (leader, _l) = listener("leader", None, seen.clone()).await;
        let (other, _o) = listener("other", None, seen.clone()).await;
        let (standby, _s) = listener("standby", Some(Some(leader.clone())), seen.clone()).await;
        let dialled = first_two_dialled(&format!("{standby}, {other}, {leader}"), &seen).await;
        assert_eq!(dialled, ["standby", "leader"]);
    }

    #[tokio::test]
    async fn a_standby_without_a_leader_sends_the_host_to_the_next_address() {
        let seen = Arc::new(Mutex::new(vec![]));
        let (next, _n) = listener("next", None, seen.clone()).await;
        let (standby, _s) = listener("standby", Some(None), seen.clone()).await;
        let dialled = first_two_dialled(&format!("{standby},{next}"), &seen).await;
        assert_eq!(dialled, ["standby", "next"]);
    }
}
