//! HTTPS for the API: a listener that hands axum only connections whose TLS
//! handshake finished. Handshakes run concurrently, each with a deadline, so
//! a client that opens a socket and says nothing (or speaks plain HTTP)
//! holds up no one; it is dropped and logged.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use trainyard_proto::tls::{server::TlsStream, TlsAcceptor};

/// How long a client has to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections whose handshake finished, waiting for axum to take them.
const READY: usize = 64;

/// An [`axum::serve::Listener`] over TLS.
pub struct TlsListener {
    addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    /// The accept loop; it stops with this listener.
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, tls: TlsAcceptor) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (done, ready) = mpsc::channel(READY);
        let acceptor = tokio::spawn(accept_loop(listener, tls, done));
        Ok(Self {
            addr,
            ready,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: TlsAcceptor,
    done: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!(error = %e, "accepting an API connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (tls, done) = (tls.clone(), done.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = done.send((stream, addr)).await;
                }
                Ok(Err(e)) => {
                    tracing::info!(%addr, error = %e, "API client's TLS handshake failed")
                }
                Err(_) => tracing::info!(%addr, "API client's TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop never ends by itself; if it did, accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// An HTTPS client's address, as the audit log records it (axum knows the
/// address of a plain TCP client by itself).
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for PeerAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> PeerAddr {
        PeerAddr(*stream.remote_addr())
    }
}
