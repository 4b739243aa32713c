//! One host connection, from challenge to close. The handshake must finish
//! within `handshake_timeout`; after it, a connection silent for
//! `idle_timeout` is closed, and so is one that sends a frame that does not
//! decode (framing may be lost). Messages go to the scheduler, which decides;
//! replies come back through this connection's own outbox.

use super::handshake::{check_hello, HandshakeRefusal};
use super::listener::ListenerConfig;
use crate::scheduler::{Command, SchedulerHandle};
use futures::{SinkExt, StreamExt};
use std::net::SocketAddr;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::Framed;
use trainyard_proto::auth::nonce;
use trainyard_proto::frame::MessageCodec;
use trainyard_proto::messages::{Challenge, Hello, HostMessage, MasterMessage, Welcome};
use trainyard_proto::PROTOCOL_VERSION;

type HostFrames = Framed<TcpStream, MessageCodec<HostMessage, MasterMessage>>;

/// Messages waiting to be written to one host. A host that lets this fill up
/// is not reading and gets disconnected by the scheduler.
const OUTBOX: usize = 4096;

pub async fn run(
    stream: TcpStream,
    addr: SocketAddr,
    session: u64,
    config: &ListenerConfig,
    scheduler: SchedulerHandle,
) {
    let mut frames = Framed::new(stream, MessageCodec::new(config.max_frame));
    let hello = match tokio::time::timeout(
        config.timers.handshake_timeout,
        handshake(&mut frames, config),
    )
    .await
    {
        Ok(Ok(hello)) => hello,
        Ok(Err(refusal)) => {
            tracing::warn!(%addr, reason = %refusal, "host refused");
            let _ = frames
                .send(MasterMessage::Refused {
                    reason: refusal.to_string(),
                })
                .await;
            return;
        }
        Err(_) => {
            tracing::warn!(%addr, timeout_ms = config.timers.handshake_timeout.as_millis() as u64, "handshake timed out; closing");
            return;
        }
    };
    let host = hello.host_id.clone();
    let (outbox, mut outgoing) = mpsc::channel(OUTBOX);
    let connected = Command::Connected {
        hello: Box::new(hello),
        session,
        addr,
        outbox,
    };
    if scheduler.send(connected).await.is_err() {
        return;
    }

    let (mut sink, mut stream) = frames.split();
    let writer = async {
        while let Some(message) = outgoing.recv().await {
            if let Err(e) = sink.send(message).await {
                tracing::info!(%host, error = %e, "writing to host failed");
                break;
            }
        }
    };
    let reader = async {
        loop {
            let next = match tokio::time::timeout(config.timers.idle_timeout, stream.next()).await {
                Ok(next) => next,
                Err(_) => {
                    tracing::warn!(%host, %addr, "host silent for longer than the idle timeout; closing");
                    break;
                }
            };
            let message = match next {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    tracing::warn!(%host, %addr, error = %e, "bad frame from host; closing the connection");
                    break;
                }
            };
            let command = Command::Message {
                host: host.clone(),
                session,
                message,
            };
            if scheduler.send(command).await.is_err() {
                break;
            }
        }
    };
    // Either side ending ends the connection; the scheduler dropping the
    // outbox (a replaced or evicted connection) ends the writer.
    tokio::select! {
        _ = writer => {}
        _ = reader => {}
    }
    let _ = scheduler
        .send(Command::Disconnected {
            host: host.clone(),
            session,
        })
        .await;
}

async fn handshake(
    frames: &mut HostFrames,
    config: &ListenerConfig,
) -> Result<Hello, HandshakeRefusal> {
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
    check_hello(&hello, &master_nonce, &config.secret)?;
    let proof = config
        .secret
        .master_proof(&master_nonce, &hello.nonce, hello.host_id.as_str());
    frames
        .send(MasterMessage::Welcome(Welcome { proof }))
        .await
        .map_err(|e| HandshakeRefusal::Invalid(format!("cannot send welcome: {e}")))?;
    Ok(hello)
}
