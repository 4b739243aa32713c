//! Real services for trainyard's tests, never mocks.
//!
//! - [`RedisServer`]: a private `redis-server` on a free loopback port, which
//!   a test may kill, restart, or restart with its data lost (the same code
//!   as `trainyard demo`'s private Redis).
//! - [`redis_url`]: `TRAINYARD_TEST_REDIS_URL` if set, else a private server.
//! - [`fresh_sqlite`] and [`fresh_postgres`]: an empty database per test. The
//!   PostgreSQL server comes from `TRAINYARD_TEST_DATABASE_URL`, which `make
//!   test` points at a private server (`scripts/with_postgres.py`) unless it
//!   is already set; a test that needs it fails with a message saying so when
//!   it is missing or down.
//!
//! - [`S3Server`]: a private S3-protocol server (`s3s-fs`, which `make
//!   test` installs under `target/`) on a free loopback port, for the
//!   artifact store's `s3://` backend.
//! - [`browser`]: headless Chromium through WebDriver, for the dashboard.
//! - [`adapter_cache`]: one compiled-adapter cache for every host of a test
//!   run, so each adapter is compiled once rather than once per test.
//! - [`uv`]: the installer `make python-tools` puts under `target/`, and
//!   [`write_tiny_wheel`]: a package to build Python environments from offline;
//!   [`write_broken_sdist`]: a source package whose build fails.
//!
//! Tests sharing one Redis keep apart by key prefix ([`unique_prefix`]).

pub mod browser;
mod s3_server;

pub use s3_server::{s3_server_binary, S3Server, S3_SERVER_VERSION};

use rand::Rng;
use std::path::{Path, PathBuf};

pub use trainyard_local_redis::{free_port, wait_for_port, RedisServer, RedisServerError};

/// A key prefix no other test uses, e.g. `t4f2a91:`.
pub fn unique_prefix() -> String {
    format!("t{:08x}:", rand::rng().random::<u32>())
}

/// Redis for a test that does not need to restart it: the shared server of
/// `TRAINYARD_TEST_REDIS_URL`, or a private one. Keep the returned guard
/// alive for the test's duration, and use [`unique_prefix`] for keys.
pub fn redis_url() -> (String, Option<RedisServer>) {
    match std::env::var("TRAINYARD_TEST_REDIS_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let server = RedisServer::start();
            (server.url(), Some(server))
        }
    }
}

/// An empty database for one test, dropped with it.
pub struct Database {
    pub url: String,
    kind: DatabaseKind,
}

enum DatabaseKind {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres { admin_url: String, name: String },
}

impl Database {
    /// `sqlite` or `postgres`, for test names and messages.
    pub fn backend(&self) -> &'static str {
        match self.kind {
            DatabaseKind::Sqlite(_) => "sqlite",
            DatabaseKind::Postgres { .. } => "postgres",
        }
    }

    /// For SQLite, the database file.
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        match &self.kind {
            DatabaseKind::Sqlite(dir) => Some(dir.path().join("trainyard.db")),
            _ => None,
        }
    }
}

/// A new SQLite database file in a temporary directory. The file itself is
/// created by whoever connects first (`mode=rwc`).
pub fn fresh_sqlite() -> Database {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(&dir.path().join("trainyard.db"));
    Database {
        url,
        kind: DatabaseKind::Sqlite(dir),
    }
}

/// The URL of a SQLite file, created on first connect.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// The PostgreSQL server tests may create databases on.
pub fn postgres_admin_url() -> String {
    match std::env::var("TRAINYARD_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "this test needs PostgreSQL: run it through `make test` or \
             `python3 scripts/with_postgres.py -- cargo test …`, which start a private \
             server (Debian package `postgresql`), or set TRAINYARD_TEST_DATABASE_URL \
             to a server where tests may create databases"
        ),
    }
}

/// A new, empty PostgreSQL database on the server of
/// `TRAINYARD_TEST_DATABASE_URL`, dropped when the returned value is.
pub async fn fresh_postgres() -> Database {
    use sqlx::Connection;
    let admin_url = postgres_admin_url();
    let name = format!("trainyard_test_{:016x}", rand::rng().random::<u64>());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin_url}: {e}"));
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|e| panic!("cannot create database {name} on {admin_url}: {e}"));
    let _ = admin.close().await;
    let url = replace_database(&admin_url, &name);
    Database {
        url,
        kind: DatabaseKind::Postgres { admin_url, name },
    }
}

/// Either backend by name: `sqlite` or `postgres`.
pub async fn fresh_database(backend: &str) -> Database {
    match backend {
        "sqlite" => fresh_sqlite(),
        "postgres" => fresh_postgres().await,
        other => panic!("unknown database backend {other:?}"),
    }
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let DatabaseKind::Postgres { admin_url, name } = &self.kind {
            let (admin_url, name) = (admin_url.clone(), name.clone());
            // Drop may run inside a runtime; do the async work on a thread of its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async move {
                    use sqlx::Connection;
                    if let Ok(mut admin) = sqlx::PgConnection::connect(&admin_url).await {
                        let _ =
                            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                                .execute(&mut admin)
                                .await;
                        let _ = admin.close().await;
                    }
                });
            })
            .join();
        }
    }
}

/// Where the hosts of every test keep compiled adapters:
/// `target/test-adapter-cache`, created if missing. Entries are keyed by the
/// component's hash and the engine's, and written atomically, so hosts of
/// concurrent tests share it safely and a rebuilt adapter gets a new entry.
pub fn adapter_cache() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-adapter-cache");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The `uv` that `make python-tools` installs under the workspace's
/// `target/`, for tests whose hosts build Python environments.
pub fn uv() -> PathBuf {
    let uv = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/python-tools/bin/uv")
        .canonicalize()
        .unwrap_or_else(|_| {
            panic!("uv is missing from target/python-tools: run `make python-tools`")
        });
    assert!(
        uv.is_file(),
        "uv is missing from target/python-tools: run `make python-tools`"
    );
    uv
}

/// Writes the wheel of `tinypkg` 1.2.3 (`import tinypkg; tinypkg.VALUE ==
/// 42`) into `dir`, a package no index has, so Python environments can be
/// built offline from it (`find_links`, `no_index`). A wheel is a zip with
/// its metadata and a RECORD of hashes; python3's `zipfile` writes it.
pub fn write_tiny_wheel(dir: &Path) {
    std::fs::create_dir_all(dir).expect("wheel directory");
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "tinypkg/__init__.py": b"VALUE = 42\n",
    "tinypkg-1.2.3.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.2.3\n",
    "tinypkg-1.2.3.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: trainyard-testkit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{name},sha256={digest},{len(data)}")
record.append("tinypkg-1.2.3.dist-info/RECORD,,")
files["tinypkg-1.2.3.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(sys.argv[1] + "/tinypkg-1.2.3-py3-none-any.whl", "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
"#;
    let status = std::process::Command::new("python3")
        .args(["-c", script, &dir.display().to_string()])
        .status()
        .expect("python3 not found: install the Debian package python3");
    assert!(
        status.success(),
        "could not write the tiny wheel into {}",
        dir.display()
    );
}

/// What the build of `brokenpkg` raises, for tests to find in the error.
pub const BROKEN_BUILD_MESSAGE: &str = "brokenpkg refuses to build: its native library is missing";

/// Writes the source distribution of `brokenpkg` 1.0 into `dir`: static
/// metadata (so it resolves), and an in-tree build backend, needing nothing
/// from any index, whose `build_wheel` raises [`BROKEN_BUILD_MESSAGE`], as
/// a `setup.py` that cannot find a native library would. Written under a
/// temporary name and renamed, so tests writing it at once never read a
/// half-written file.
pub fn write_broken_sdist(dir: &Path) {
    std::fs::create_dir_all(dir).expect("source package directory");
    let script = r#"
import io, os, sys, tarfile
backend = f"""
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError({sys.argv[2]!r})
"""
pyproject = """[project]
name = "brokenpkg"
version = "1.0"

[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]
"""
files = {
    "brokenpkg-1.0/pyproject.toml": pyproject,
    "brokenpkg-1.0/backend.py": backend,
    "brokenpkg-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.0\n",
}
path = os.path.join(sys.argv[1], "brokenpkg-1.0.tar.gz")
with tarfile.open(f"{path}.{os.getpid()}", "w:gz") as archive:
    for name, text in files.items():
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
os.replace(f"{path}.{os.getpid()}", path)
"#;
    let status = std::process::Command::new("python3")
        .args([
            "-c",
            script,
            &dir.display().to_string(),
            BROKEN_BUILD_MESSAGE,
        ])
        .status()
        .expect("python3 not found: install the Debian package python3");
    assert!(
        status.success(),
        "could not write the broken source package into {}",
        dir.display()
    );
}

/// Timers for clusters that must recover in seconds, not minutes: the
/// multi-process tests and the fast recovery benchmark. A lease lapses 2 s
/// after its host's last renewal; the sweep runs four times a second.
pub fn fast_timers() -> trainyard_proto::Timers {
    use std::time::Duration;
    use trainyard_proto::Timers;
    Timers {
        heartbeat_interval: Duration::from_millis(200),
        heartbeat_ttl: Duration::from_millis(600),
        lease_ttl: Duration::from_millis(2000),
        lease_safety_margin: Duration::from_millis(300),
        sweep_interval: Duration::from_millis(250),
        dispatch_ack_timeout: Duration::from_millis(3000),
        reconnect_initial: Duration::from_millis(100),
        reconnect_max: Duration::from_millis(800),
        reconnect_jitter: 0.25,
        handshake_timeout: Duration::from_secs(3),
        idle_timeout: Duration::from_millis(1500),
        stop_grace: Duration::from_millis(500),
        report_resend_interval: Duration::from_millis(500),
        ..Timers::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn database_urls_swap_only_the_database_name() {
        assert_eq!(
            replace_database("postgres://postgres@127.0.0.1:5432/test", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            replace_database("postgres://u:p@h/test?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(
            replace_database("postgres://h:5432", "x"),
            "postgres://h:5432/x"
        );
    }

    #[test]
    fn a_private_redis_restarts_empty_on_the_same_port() {
        let mut server = RedisServer::start();
        let port = server.port();
        server.restart_empty();
        assert_eq!(server.port(), port);
        assert!(wait_for_port(port, Duration::from_secs(1)).is_some());
    }
}
