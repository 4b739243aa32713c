//! A private `redis-server` on a free loopback port, without persistence,
//! stopped when dropped: what `trainyard demo` runs on when no Redis is
//! configured. The tests use the same one (through `trainyard-testkit`),
//! and may kill it, or restart it empty.
//!
//! A crate of its own, on `std` and `tempfile` only, so that the master's
//! and host's tests need not build the whole `trainyard` crate for it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a fresh server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A loopback port nobody listens on right now, for a server started next.
///
/// Chosen outside the kernel's ephemeral range: a port that `bind(0)` hands
/// out is ephemeral, and between this check and the server's own `bind`
/// any outgoing connection on the machine may take it (seen with several
/// test clusters running at once).
///
/// A port is free only until someone binds it, which may be seconds later
/// (a standby master starts once the first one leads). So a port handed out
/// is also [reserved](reserve) until this process exits, and never handed
/// out twice: not by this process (a cluster's two listeners once got one),
/// nor by another that reserves its ports the same way (another test
/// cluster once took a standby's port before it listened).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<(u16, Option<Reservation>)>> =
        std::sync::Mutex::new(Vec::new());
    let (low, high) = listen_range(ephemeral_range());
    let span = u64::from(high - low) + 1;
    for _ in 0..1000 {
        let port = low + (random_u64() % span) as u16;
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if given.iter().any(|(p, _)| *p == port) {
            continue;
        }
        let reservation = match reserve(port) {
            Ok(reservation) => Some(reservation),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            // Cannot reserve at all (no abstract sockets here): free by the
            // check below alone, as before reservations.
            Err(_) => None,
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push((port, reservation));
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind a loopback port")
}

/// A claim on a port among the processes of this machine's network
/// namespace that reserve theirs this way: an abstract Unix socket named
/// after the port, which only one socket can be bound to at a time and which
/// the kernel releases when its process exits, however it exits. It claims
/// nothing against a process that binds the port without asking.
struct Reservation {
    _socket: std::os::unix::net::UnixListener,
}

fn reserve(port: u16) -> std::io::Result<Reservation> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("trainyard-port-{port}");
    let address = SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixListener::bind_addr(&address).map(|socket| Reservation { _socket: socket })
}

/// The kernel's ephemeral port range (Linux's default when unreadable).
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut ends = text.split_whitespace().map(str::parse::<u16>);
            Some((ends.next()?.ok()?, ends.next()?.ok()?))
        })
        .unwrap_or((32768, 60999))
}

/// The wider run of unprivileged ports below or above the ephemeral range
/// `(low, high)`; all of them when neither side has a thousand.
fn listen_range((low, high): (u16, u16)) -> (u16, u16) {
    let below = (1024, low.saturating_sub(1));
    let above = (high.saturating_add(1), u16::MAX);
    let width = |(a, b): (u16, u16)| b.saturating_sub(a);
    let wider = if width(below) >= width(above) {
        below
    } else {
        above
    };
    if width(wider) >= 1000 {
        wider
    } else {
        (1024, u16::MAX)
    }
}

/// A random number from std's per-process hash keys (this file depends on
/// std and tempfile only).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Waits until something accepts TCP connections on the loopback port.
pub fn wait_for_port(port: u16, timeout: Duration) -> Option<()> {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Why a private server could not be started.
#[derive(Debug)]
pub enum RedisServerError {
    /// `redis-server` could not be run at all.
    Spawn(std::io::Error),
    /// It ran but did not listen in time.
    NotListening { port: u16 },
}

impl std::fmt::Display for RedisServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisServerError::Spawn(e) => write!(
                f,
                "cannot start redis-server ({e}): install the Debian package `redis-server`"
            ),
            RedisServerError::NotListening { port } => write!(
                f,
                "redis-server did not listen on port {port} within {START_TIMEOUT:?}"
            ),
        }
    }
}

impl std::error::Error for RedisServerError {}

/// A `redis-server` of one's own, on a free port, without persistence.
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server and waits until it answers.
    pub fn try_start() -> Result<Self, RedisServerError> {
        let mut server = Self {
            port: free_port(),
            dir: tempfile::tempdir().map_err(RedisServerError::Spawn)?,
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    /// [`RedisServer::try_start`] for tests: panics with what to install.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    fn spawn(&mut self) -> Result<(), RedisServerError> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(RedisServerError::Spawn)?;
        self.child = Some(child);
        wait_for_port(self.port, START_TIMEOUT)
            .ok_or(RedisServerError::NotListening { port: self.port })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server with SIGKILL; its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty. Panics if it does
    /// not come back (a test's Redis).
    pub fn restart_empty(&mut self) {
        self.kill();
        self.spawn().unwrap_or_else(|e| panic!("{e}"));
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::{free_port, listen_range, reserve};

    #[test]
    fn servers_listen_outside_the_ephemeral_range() {
        assert_eq!(listen_range((32768, 60999)), (1024, 32767));
        assert_eq!(listen_range((1024, 40000)), (40001, 65535));
        assert_eq!(listen_range((1500, 65000)), (1024, 65535));
        let (low, high) = listen_range(super::ephemeral_range());
        let mut given = std::collections::HashSet::new();
        for _ in 0..500 {
            let port = free_port();
            assert!(
                (low..=high).contains(&port),
                "{port} outside {low}..={high}"
            );
            assert!(given.insert(port), "{port} handed out twice");
        }
    }

    #[test]
    fn a_port_handed_out_stays_reserved_against_other_claims() {
        let port = free_port();
        let second = reserve(port).map(|_| ()).expect_err("reserved twice");
        assert_eq!(second.kind(), std::io::ErrorKind::AddrInUse);
        // What another process sees: the same name, taken.
        let other = std::process::Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n\
                     try: s.bind(b'\\0trainyard-port-{port}')\n\
                     except OSError: sys.exit(3)"
                ),
            ])
            .status()
            .expect("run python3");
        assert_eq!(other.code(), Some(3), "another process could claim {port}");
    }
}
