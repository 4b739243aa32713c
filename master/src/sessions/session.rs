//! One host connection, from challenge to close. The handshake — including
//! the scheduler's admission, which refuses a second connection claiming
//! the id of a live host — must finish within `handshake_timeout`; after
//! it, a connection silent for `idle_timeout` is closed, and so is one that
//! sends a frame that does not decode (framing may be lost). Messages go to the scheduler, which decides;
//! replies come back through this connection's own outbox. Log batches go
//! to the log recorder instead ([`crate::logs`]); a report goes on to the
//! scheduler only once the lines shipped before it are stored.

use super::handshake::{check_certificate, check_hello, HandshakeRefusal};
use super::listener::ListenerConfig;
use super::transport::{self, HostStream, Transport};
use crate::logs::Stored;
use crate::scheduler::{Admission, Command, SchedulerHandle};
use futures::{SinkExt, StreamExt};
use std::net::SocketAddr;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;
use trainyard_proto::auth::nonce;
use trainyard_proto::frame::MessageCodec;
use trainyard_proto::messages::{Challenge, Hello, HostMessage, MasterMessage, Welcome};
use trainyard_proto::tls::rustls::pki_types::CertificateDer;
use trainyard_proto::{HostId, PROTOCOL_VERSION};

type HostFrames = Framed<HostStream, MessageCodec<HostMessage, MasterMessage>>;

/// Messages waiting to be written to one host. A host that lets this fill up
/// is not reading and gets disconnected by the scheduler.
const OUTBOX: usize = 4096;

/// Serves one host connection: the transport opened, the handshake
/// (with the scheduler's admission) done within `handshake_timeout`, then
/// messages carried both ways until either side ends.
pub async fn run(
    stream: TcpStream,
    addr: SocketAddr,
    session: u64,
    config: &ListenerConfig,
    scheduler: SchedulerHandle,
) {
    let Some(Transport {
        stream,
        channel,
        certificate,
    }) = open(stream, addr, config).await
    else {
        return;
    };
    let peer = Peer {
        addr,
        channel: &channel,
        certificate: certificate.as_ref().filter(|_| config.host_certificates),
    };
    let mut frames = Framed::new(stream, MessageCodec::new(config.max_frame));
    let (outbox, outgoing) = mpsc::channel(OUTBOX);
    let Some(host) = greet(&mut frames, config, &scheduler, session, &peer, outbox).await else {
        return;
    };
    serve(frames, outgoing, &host, addr, session, config, &scheduler).await;
    let _ = scheduler
        .send(Command::Disconnected {
            host: host.clone(),
            session,
        })
        .await;
}

/// The transport (TLS when configured), within `handshake_timeout`.
async fn open(stream: TcpStream, addr: SocketAddr, config: &ListenerConfig) -> Option<Transport> {
    let timeout = config.timers.handshake_timeout;
    match tokio::time::timeout(timeout, transport::open(stream, config.tls.as_ref())).await {
        Ok(Ok(t)) => Some(t),
        Ok(Err(e)) => {
            tracing::warn!(%addr, error = %e, "TLS handshake with a host failed; closing");
            None
        }
        Err(_) => {
            tracing::warn!(%addr, timeout_ms = timeout.as_millis() as u64, "TLS handshake with a host timed out; closing");
            None
        }
    }
}

/// The handshake within `handshake_timeout`: the host admitted and
/// welcomed, or refused (told why) and forgotten by the scheduler.
async fn greet(
    frames: &mut HostFrames,
    config: &ListenerConfig,
    scheduler: &SchedulerHandle,
    session: u64,
    peer: &Peer<'_>,
    outbox: mpsc::Sender<MasterMessage>,
) -> Option<HostId> {
    let addr = peer.addr;
    let mut admitted = None;
    let greeted = tokio::time::timeout(
        config.timers.handshake_timeout,
        handshake(
            frames,
            config,
            scheduler,
            session,
            peer,
            outbox,
            &mut admitted,
        ),
    )
    .await;
    let welcomed = match greeted {
        Ok(Ok(())) => true,
        Ok(Err(refusal)) => {
            tracing::warn!(%addr, reason = %refusal, "host refused");
            let _ = frames
                .send(MasterMessage::Refused {
                    reason: refusal.to_string(),
                })
                .await;
            false
        }
        Err(_) => {
            tracing::warn!(%addr, timeout_ms = config.timers.handshake_timeout.as_millis() as u64, "handshake timed out; closing");
            false
        }
    };
    let host = admitted?;
    if !welcomed {
        // Admitted, but never welcomed: the scheduler must forget it.
        let _ = scheduler
            .send(Command::Disconnected { host, session })
            .await;
        return None;
    }
    Some(host)
}

/// Carries messages both ways until the connection ends: a writer
/// draining the outbox, a reader handing messages in order to the
/// forwarder, which holds a report back until the lines that came before
/// it are stored.
async fn serve(
    frames: HostFrames,
    mut outgoing: mpsc::Receiver<MasterMessage>,
    host: &HostId,
    addr: SocketAddr,
    session: u64,
    config: &ListenerConfig,
    scheduler: &SchedulerHandle,
) {
    let (mut sink, stream) = frames.split();
    let writer = async {
        while let Some(message) = outgoing.recv().await {
            // A turn's messages to this host go out in one write: flushed
            // once nothing more waits, never held back behind nothing.
            let written = match sink.feed(message).await {
                Ok(()) if outgoing.is_empty() => sink.flush().await,
                other => other,
            };
            if let Err(e) = written {
                tracing::info!(%host, error = %e, "writing to host failed");
                break;
            }
        }
    };
    let (to_forward, forwarding) = mpsc::channel(FORWARD_QUEUE);
    let reader = read(stream, host, addr, config, to_forward);
    let forwarder = forward(forwarding, scheduler, host, session);
    // Either side ending ends the connection; the scheduler dropping the
    // outbox (a replaced or evicted connection) ends the writer. What was
    // read before the connection ended reaches the scheduler first.
    tokio::select! {
        _ = writer => {}
        _ = async { tokio::join!(reader, forwarder) } => {}
    }
}

/// Messages read from a host and not yet handed to the scheduler.
const FORWARD_QUEUE: usize = 256;

/// A message on its way to the scheduler, with what it waits for.
struct Forward {
    message: HostMessage,
    /// For a report: the log lines shipped before it, being stored.
    lines_stored: Option<Stored>,
}

/// Reads the host's messages until the connection ends, goes silent or
/// sends a bad frame. Log batches go straight to the log recorder;
/// everything else goes to `forward`, in order.
async fn read(
    mut stream: futures::stream::SplitStream<HostFrames>,
    host: &HostId,
    addr: SocketAddr,
    config: &ListenerConfig,
    forward: mpsc::Sender<Forward>,
) {
    loop {
        let next = match tokio::time::timeout(config.timers.idle_timeout, stream.next()).await {
            Ok(next) => next,
            Err(_) => {
                tracing::warn!(%host, %addr, "host silent for longer than the idle timeout; closing");
                break;
            }
        };
        let (message, lines_stored) = match next {
            None => break,
            Some(Ok(HostMessage::Logs(batch))) => {
                // Stored by the log recorder, never queued behind (or
                // ahead of) the scheduler's work.
                config.logs.offer(batch);
                continue;
            }
            Some(Ok(HostMessage::Report(report))) => {
                // The host ships an attempt's last lines before its report:
                // they are stored before the report can end the task.
                let stored = config.logs.barrier().await;
                (HostMessage::Report(report), Some(stored))
            }
            Some(Ok(HostMessage::Adapters { adapters })) => {
                if let Err(e) = super::handshake::check_adapters(&adapters) {
                    tracing::warn!(%host, %addr, error = %e, "invalid adapters from host; closing the connection");
                    break;
                }
                (HostMessage::Adapters { adapters }, None)
            }
            Some(Ok(m)) => (m, None),
            Some(Err(e)) => {
                tracing::warn!(%host, %addr, error = %e, "bad frame from host; closing the connection");
                break;
            }
        };
        let item = Forward {
            message,
            lines_stored,
        };
        if forward.send(item).await.is_err() {
            break;
        }
    }
}

/// Hands the host's messages to the scheduler in the order they came, each
/// report once the lines before it are stored.
async fn forward(
    mut forwarding: mpsc::Receiver<Forward>,
    scheduler: &SchedulerHandle,
    host: &HostId,
    session: u64,
) {
    while let Some(Forward {
        message,
        lines_stored,
    }) = forwarding.recv().await
    {
        if let Some(stored) = lines_stored {
            stored.wait().await;
        }
        let command = Command::Message {
            host: host.clone(),
            session,
            message,
        };
        if scheduler.send(command).await.is_err() {
            break;
        }
    }
}

/// Who is at the other end, as the transport knows it.
struct Peer<'a> {
    addr: SocketAddr,
    /// The TLS channel binding; empty on plain TCP.
    channel: &'a [u8],
    /// The host's certificate, when the listener requires one.
    certificate: Option<&'a CertificateDer<'static>>,
}

/// Challenge, hello, admission by the scheduler, welcome. Once admitted,
/// the host's id is in `admitted`: from then on the scheduler counts it
/// connected, so every way out of [`run`] tells it when the connection ends.
async fn handshake(
    frames: &mut HostFrames,
    config: &ListenerConfig,
    scheduler: &SchedulerHandle,
    session: u64,
    peer: &Peer<'_>,
    outbox: mpsc::Sender<MasterMessage>,
    admitted: &mut Option<HostId>,
) -> Result<(), HandshakeRefusal> {
    let master_nonce = nonce();
    frames
        .send(MasterMessage::Challenge(Challenge {
            protocol: PROTOCOL_VERSION,
            nonce: master_nonce.clone(),
        }))
        .await
        .map_err(|e| HandshakeRefusal::Invalid(format!("cannot send the challenge: {e}")))?;
    let hello = match frames.next().await {
        Some(Ok(HostMessage::Hello(hello))) => hello,
        Some(Ok(other)) => {
            return Err(HandshakeRefusal::Invalid(format!(
                "expected hello, got {} before the handshake",
                other.kind()
            )))
        }
        Some(Err(e)) => return Err(HandshakeRefusal::Invalid(e.to_string())),
        None => {
            return Err(HandshakeRefusal::Invalid(
                "connection closed during the handshake".into(),
            ))
        }
    };
    check_hello(&hello, &master_nonce, &config.secret, peer.channel)?;
    if config.host_certificates {
        check_certificate(peer.certificate, &hello.host_id)?;
    }
    let proof = config.secret.master_proof(
        &master_nonce,
        &hello.nonce,
        hello.host_id.as_str(),
        peer.channel,
    );
    let host = hello.host_id.clone();
    admit(scheduler, hello, session, peer.addr, outbox, &config.timers).await?;
    *admitted = Some(host);
    frames
        .send(MasterMessage::Welcome(Welcome {
            proof,
            artifacts: config.artifacts.clone(),
        }))
        .await
        .map_err(|e| HandshakeRefusal::Invalid(format!("cannot send welcome: {e}")))
}

/// Asks the scheduler to admit the host. While another connection holds
/// its id, that connection is probed first: it keeps its place if it
/// answers within the probe timeout, and is closed (this one admitted) if
/// it does not.
async fn admit(
    scheduler: &SchedulerHandle,
    hello: Hello,
    session: u64,
    addr: SocketAddr,
    outbox: mpsc::Sender<MasterMessage>,
    timers: &trainyard_proto::Timers,
) -> Result<(), HandshakeRefusal> {
    let hello = Box::new(hello);
    let mut contested = None;
    loop {
        let (reply, answer) = oneshot::channel();
        let command = Command::Admit {
            hello: hello.clone(),
            session,
            addr,
            outbox: outbox.clone(),
            contested,
            reply,
        };
        let gone = || HandshakeRefusal::Invalid("the master is shutting down".into());
        scheduler.send(command).await.map_err(|_| gone())?;
        match answer.await.map_err(|_| gone())? {
            Admission::Welcome => return Ok(()),
            Admission::Refused(reason) => return Err(HandshakeRefusal::Duplicate(reason)),
            Admission::Probing { since } => {
                tokio::time::sleep(timers.liveness_probe_timeout()).await;
                contested = Some(since);
            }
        }
    }
}
