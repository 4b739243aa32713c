//! One master per SQLite database: a master takes an exclusive `flock` on
//! `<database file>-master.lock` before it touches the database and holds
//! it for its whole life; the kernel releases it when the process dies,
//! however it dies. A second master refuses to start. (On PostgreSQL
//! several masters run, one leading: see `leadership`.)

use super::connect::{backend_of, redact};
use super::{Backend, StoreError};
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// How long a starting master keeps trying a held lock before it refuses
/// to start: a predecessor that was just killed may still be exiting.
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
    #[error("cannot take the master lock {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases it.
pub enum MasterLock {
    File(#[allow(dead_code)] Flock<File>),
    /// Nothing to hold: an in-memory SQLite database belongs to one
    /// process already, and on PostgreSQL leadership decides who runs.
    Private,
}

impl MasterLock {
    /// Takes the lock of the database at `url`, trying for up to
    /// [`LOCK_PATIENCE`] while another master holds it; then says who does.
    pub async fn acquire(url: &str) -> Result<MasterLock, StoreError> {
        let until = tokio::time::Instant::now() + LOCK_PATIENCE;
        loop {
            match Self::try_acquire(url).await {
                Err(StoreError::Lock(LockError::FileHeld { .. }))
                    if tokio::time::Instant::now() < until =>
                {
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                other => return other,
            }
        }
    }

    async fn try_acquire(url: &str) -> Result<MasterLock, StoreError> {
        match backend_of(url) {
            Some(Backend::Sqlite) => file_lock(url),
            Some(Backend::Postgres) => Ok(MasterLock::Private),
            None => Err(StoreError::UnsupportedUrl { url: redact(url) }),
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
