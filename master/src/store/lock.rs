//! One master per database. Until masters can share the work, a second
//! master on the same database would dispatch the same tasks twice, so a
//! master takes an exclusive lock before it touches the database and holds
//! it for its whole life:
//!
//! - **PostgreSQL**: a session-level advisory lock
//!   (`pg_try_advisory_lock`), held by a connection of its own. Advisory
//!   locks belong to one database, and the task tables are not divided by
//!   the Redis key prefix, so one lock per database is the rule: two
//!   clusters need two databases. The server drops the lock when that
//!   connection ends — a master killed with SIGKILL releases it as soon as
//!   its socket closes.
//! - **SQLite**: an exclusive `flock` on `<database file>-master.lock`,
//!   which the kernel releases when the process dies, however it dies.
//!
//! If the lock connection to PostgreSQL breaks (a server restart), the
//! master takes the lock again on a new connection; if another master has
//! taken it meanwhile, this one stops.

use super::connect::{backend_of, redact};
use super::{Backend, StoreError};
use nix::fcntl::{Flock, FlockArg};
use sqlx::{Connection, PgConnection};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// The advisory lock's key: "trainyar" in ASCII.
pub const POSTGRES_LOCK_KEY: i64 = 0x7472_6169_6e79_6172;
/// How often the PostgreSQL lock connection is checked.
const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How long a starting master keeps trying a held lock before it refuses
/// to start: a predecessor that was just killed may take a moment to be
/// noticed by the database server (its socket closing).
pub const LOCK_PATIENCE: Duration = Duration::from_secs(5);
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Why this master may not run on the database.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another master is running on {url}: it holds {path}{holder}. Only one master may run \
         per database; stop the other one first"
    )]
    FileHeld {
        url: String,
        path: String,
        holder: String,
    },
    #[error(
        "another master is running on {url}: it holds the database's master lock (PostgreSQL \
         advisory lock {POSTGRES_LOCK_KEY}{holder}). Only one master may run per database, \
         whatever its Redis key prefix; stop the other one first"
    )]
    PostgresHeld { url: String, holder: String },
    #[error("cannot take the master lock {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot take the master lock on {url}: {source}")]
    Postgres { url: String, source: sqlx::Error },
}

/// The held lock; dropping it releases it.
pub enum MasterLock {
    File(#[allow(dead_code)] Flock<File>),
    Postgres {
        url: String,
        conn: PgConnection,
    },
    /// An in-memory SQLite database belongs to one process already.
    Private,
}

impl MasterLock {
    /// Takes the lock of the database at `url`, trying for up to
    /// [`LOCK_PATIENCE`] while another master holds it; then says who does.
    pub async fn acquire(url: &str) -> Result<MasterLock, StoreError> {
        let until = tokio::time::Instant::now() + LOCK_PATIENCE;
        loop {
            match Self::try_acquire(url).await {
                Err(StoreError::Lock(
                    LockError::FileHeld { .. } | LockError::PostgresHeld { .. },
                )) if tokio::time::Instant::now() < until => {
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                other => return other,
            }
        }
    }

    async fn try_acquire(url: &str) -> Result<MasterLock, StoreError> {
        match backend_of(url) {
            Some(Backend::Sqlite) => file_lock(url),
            Some(Backend::Postgres) => {
                let conn = postgres_lock(url).await?;
                Ok(MasterLock::Postgres {
                    url: url.to_string(),
                    conn,
                })
            }
            None => Err(StoreError::UnsupportedUrl { url: redact(url) }),
        }
    }

    /// Resolves only if the lock is lost to another master, with the
    /// reason; a lock that cannot be lost never resolves.
    pub async fn lost(self) -> String {
        let MasterLock::Postgres { url, mut conn } = self else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(CHECK_INTERVAL).await;
            if conn.ping().await.is_ok() {
                continue;
            }
            tracing::warn!(url = %redact(&url), "the connection holding the master lock broke; taking the lock again");
            match postgres_lock(&url).await {
                Ok(fresh) => {
                    conn = fresh;
                    tracing::info!("master lock taken again");
                }
                Err(StoreError::Lock(e @ LockError::PostgresHeld { .. })) => return e.to_string(),
                Err(e) => tracing::warn!(error = %e, "cannot take the master lock again yet"),
            }
        }
    }
}

fn file_lock(url: &str) -> Result<MasterLock, StoreError> {
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).map_err(|source| {
        StoreError::InvalidUrl {
            url: redact(url),
            source,
        }
    })?;
    let database = options.get_filename();
    let name = database.to_string_lossy();
    if name.is_empty() || name == ":memory:" || url.contains("mode=memory") {
        return Ok(MasterLock::Private);
    }
    let path = PathBuf::from(format!("{name}-master.lock"));
    let shown = path.display().to_string();
    let io = |source| {
        StoreError::Lock(LockError::File {
            path: shown.clone(),
            source,
        })
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut held) => {
            // Who holds it, for the message a second master prints.
            held.set_len(0).map_err(io)?;
            write!(held, "{}", std::process::id()).map_err(io)?;
            Ok(MasterLock::File(held))
        }
        Err((_, errno)) if errno == nix::errno::Errno::EWOULDBLOCK => {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .and_then(|pid| pid.trim().parse::<u32>().ok())
                .map(|pid| format!(" (process {pid})"))
                .unwrap_or_default();
            Err(StoreError::Lock(LockError::FileHeld {
                url: redact(url),
                path: shown,
                holder,
            }))
        }
        Err((_, errno)) => Err(io(std::io::Error::from(errno))),
    }
}

/// A new connection holding the advisory lock.
async fn postgres_lock(url: &str) -> Result<PgConnection, StoreError> {
    let failed = |source| {
        StoreError::Lock(LockError::Postgres {
            url: redact(url),
            source,
        })
    };
    let options = sqlx::postgres::PgConnectOptions::from_str(url)
        .map_err(failed)?
        .application_name(&format!("trainyard-master (pid {})", std::process::id()));
    let mut conn = PgConnection::connect_with(&options).await.map_err(failed)?;
    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(POSTGRES_LOCK_KEY)
        .fetch_one(&mut conn)
        .await
        .map_err(failed)?;
    if taken {
        return Ok(conn);
    }
    let holder: Option<String> = sqlx::query_scalar(
        "SELECT a.application_name || COALESCE(' from ' || host(a.client_addr), '') \
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.database = \
             (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND l.classid::bigint = ($1 >> 32) AND l.objid::bigint = ($1 & 4294967295) \
         LIMIT 1",
    )
    .bind(POSTGRES_LOCK_KEY)
    .fetch_optional(&mut conn)
    .await
    .ok()
    .flatten();
    let _ = conn.close().await;
    Err(StoreError::Lock(LockError::PostgresHeld {
        url: redact(url),
        holder: holder.map(|h| format!(", held by {h}")).unwrap_or_default(),
    }))
}
