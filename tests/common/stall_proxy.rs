//! A TCP proxy in front of a test's server (the S3 server) that, once
//! armed, stalls an upload: after the given number of bytes have gone
//! from clients to the server, the connection carrying the next byte stops
//! being forwarded, both of its sockets left open, as when a host hangs
//! mid-upload. Only that one connection stalls (the proxy disarms itself);
//! every other, before and after, passes untouched. The test then kills
//! the host while its upload is provably under way.
//!
//! It runs on a runtime of its own: a test's runtime has one thread, which
//! a blocking call (running the CLI) would otherwise hold while the master
//! reads the store through this proxy.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Trap {
    /// Bytes still to pass before the stall; `u64::MAX` when disarmed.
    budget: AtomicU64,
    stalled: AtomicBool,
}

pub struct StallProxy {
    port: u16,
    trap: Arc<Trap>,
    /// Forwards the bytes; shut down with the proxy.
    runtime: Option<tokio::runtime::Runtime>,
}

impl StallProxy {
    /// A proxy on a free loopback port to `127.0.0.1:upstream`, disarmed.
    pub fn start(upstream: u16) -> StallProxy {
        let port = trainyard_testkit::free_port();
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("proxy listener");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        let trap = Arc::new(Trap::default());
        trap.budget.store(u64::MAX, Ordering::SeqCst);
        let shared = trap.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("proxy listener");
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, upstream, shared.clone()));
            }
        });
        StallProxy {
            port,
            trap,
            runtime: Some(runtime),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stalls the connection that carries byte `after + 1` from now on.
    pub fn arm(&self, after: u64) {
        self.trap.budget.store(after, Ordering::SeqCst);
    }

    /// Waits until a connection has stalled; false when none did in time.
    pub async fn stalled(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.trap.stalled.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn forward(client: TcpStream, upstream: u16, trap: Arc<Trap>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let passed = trap
            .budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                (left != u64::MAX).then(|| left.saturating_sub(n as u64))
            });
        if matches!(passed, Ok(left) if left < n as u64) {
            // The stall: this connection's bytes go nowhere from now on,
            // and the proxy lets every other connection through.
            trap.budget.store(u64::MAX, Ordering::SeqCst);
            trap.stalled.store(true, Ordering::SeqCst);
            let _keep_open = (client_read, server_write);
            std::future::pending::<()>().await;
            return;
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = server_write.shutdown().await;
}
