//! What a host connection runs over: plain TCP, or TLS when the master has
//! a certificate. TLS is set up before the handshake and hands it the two
//! things it checks: the session's channel binding, which the host's proof
//! must be made for, and the host's certificate, which must name its id.

use std::io;
use tokio::net::TcpStream;
use tokio_util::either::Either;
use trainyard_proto::tls::rustls::pki_types::CertificateDer;
use trainyard_proto::tls::{channel_binding, server, TlsAcceptor};

/// A host's byte stream, whichever the transport.
pub type HostStream = Either<TcpStream, server::TlsStream<TcpStream>>;

pub struct Transport {
    pub stream: HostStream,
    /// The TLS exporter value; empty on plain TCP.
    pub channel: Vec<u8>,
    /// The end-entity certificate the host presented (mutual TLS only).
    pub certificate: Option<CertificateDer<'static>>,
}

/// Plain TCP as it is, or the server side of a TLS handshake. An error is
/// the TLS layer's refusal: a certificate from another CA, an expired one,
/// no TLS at all.
pub async fn open(stream: TcpStream, tls: Option<&TlsAcceptor>) -> io::Result<Transport> {
    let Some(acceptor) = tls else {
        return Ok(Transport {
            stream: Either::Left(stream),
            channel: Vec::new(),
            certificate: None,
        });
    };
    let stream = acceptor.accept(stream).await?;
    let (_, connection) = stream.get_ref();
    let channel = channel_binding(connection).map_err(io::Error::other)?;
    let certificate = connection
        .peer_certificates()
        .and_then(|chain| chain.first())
        .cloned();
    Ok(Transport {
        stream: Either::Right(stream),
        channel,
        certificate,
    })
}
