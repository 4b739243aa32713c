//! Host connections: the TCP listener, TLS (when configured), the
//! handshake, and the per-connection session that carries messages between
//! a host and the scheduler.
//!
//! Every connection gets fresh state of its own (its codec, its outbox, its
//! session id); nothing is shared between connections but the scheduler's
//! handle, so a reconnecting host starts clean by construction.

mod handshake;
mod listener;
mod session;
pub(crate) mod transport;

pub use handshake::{check_certificate, check_hello, HandshakeRefusal};
pub use listener::{serve, ListenerConfig};
