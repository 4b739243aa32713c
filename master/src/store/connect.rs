//! Opening the database: which backend a URL names, the per-connection
//! settings SQLite needs, and the embedded migrations of each backend.
//!
//! The first connection is opened on its own, before the pool: a pool retries
//! a refused connection until its acquire timeout and then reports only that
//! it timed out, while an operator needs the real cause ("connection refused",
//! "password authentication failed", "database does not exist").

use super::{migrations, Backend, Result, StoreError};
use futures::future::BoxFuture;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, ConnectOptions, Connection, Executor};
use std::str::FromStr;
use std::time::Duration;

/// SQLite has one writer at a time; extra connections serve reads (WAL lets
/// them run beside the writer).
const SQLITE_CONNECTIONS: u32 = 4;
const POSTGRES_CONNECTIONS: u32 = 10;
/// How long a caller waits for a free connection before its call fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a SQLite statement waits for another connection's write lock.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 10_000;
/// Every commit is on disk before it is acknowledged.
pub(super) const SQLITE_SYNCHRONOUS: &str = "FULL";

/// Connects, migrates, and returns the pool.
pub(super) async fn open(url: &str, in_transaction: Duration) -> Result<(AnyPool, Backend)> {
    sqlx::any::install_default_drivers();
    let backend = backend_of(url).ok_or_else(|| StoreError::UnsupportedUrl { url: redact(url) })?;
    let url = match backend {
        Backend::Sqlite => prepare_sqlite(url)?,
        Backend::Postgres => url.to_string(),
    };
    let shown = redact(&url);
    let options = AnyConnectOptions::from_str(&url).map_err(|source| StoreError::InvalidUrl {
        url: shown.clone(),
        source,
    })?;

    let mut first = options
        .connect()
        .await
        .map_err(|source| StoreError::Connect {
            url: shown.clone(),
            source,
        })?;
    configure(backend, &mut first, in_transaction)
        .await
        .map_err(|source| StoreError::Connect {
            url: shown.clone(),
            source,
        })?;
    migrations::run(backend, &mut first)
        .await
        .map_err(|source| StoreError::Migrate {
            url: shown.clone(),
            source,
        })?;
    let _ = first.close().await;

    let max_connections = match backend {
        Backend::Sqlite => SQLITE_CONNECTIONS,
        Backend::Postgres => POSTGRES_CONNECTIONS,
    };
    let pool = AnyPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .after_connect(move |conn, _meta| configure_boxed(backend, conn, in_transaction))
        .connect_with(options)
        .await
        .map_err(|source| StoreError::Connect { url: shown, source })?;
    Ok((pool, backend))
}

fn configure_boxed(
    backend: Backend,
    conn: &mut AnyConnection,
    in_transaction: Duration,
) -> BoxFuture<'_, Result<(), sqlx::Error>> {
    Box::pin(configure(backend, conn, in_transaction))
}

/// Per-connection settings. SQLite keeps them per connection, so every new
/// connection of the pool gets them. The busy timeout comes first: switching
/// to WAL needs a lock another connection may hold for a moment.
/// `in_transaction` is PostgreSQL's `idle_in_transaction_session_timeout`.
async fn configure(
    backend: Backend,
    conn: &mut AnyConnection,
    in_transaction: Duration,
) -> Result<(), sqlx::Error> {
    if backend == Backend::Sqlite {
        conn.execute(format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}").as_str())
            .await?;
        conn.execute("PRAGMA journal_mode = WAL").await?;
        // FULL syncs the WAL at every commit, so a write the API acknowledged
        // (a submission's 201, a recorded report) survives power loss; NORMAL
        // would sync only at checkpoints and could lose the last commits.
        conn.execute(format!("PRAGMA synchronous = {SQLITE_SYNCHRONOUS}").as_str())
            .await?;
        conn.execute("PRAGMA foreign_keys = ON").await?;
    } else {
        // A stalled master must not hold its term's share lock
        // (`leadership`) against a successor.
        let timeout = in_transaction.as_millis();
        conn.execute(format!("SET idle_in_transaction_session_timeout = {timeout}").as_str())
            .await?;
    }
    Ok(())
}

/// The backend a URL's scheme names, if it is one we serve.
pub fn backend_of(url: &str) -> Option<Backend> {
    let (scheme, _) = url.split_once(':')?;
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" => Some(Backend::Sqlite),
        "postgres" | "postgresql" => Some(Backend::Postgres),
        _ => None,
    }
}

/// Creates the directory of a SQLite file and makes sure the file is
/// created if missing (`mode=rwc`), unless the URL chose a mode itself.
fn prepare_sqlite(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let (database, params) = match rest.split_once('?') {
        Some((d, p)) => (d, Some(p)),
        None => (rest, None),
    };
    let chosen_mode = params.is_some_and(|p| p.split('&').any(|kv| kv.starts_with("mode=")));
    if database.is_empty() || database == ":memory:" || chosen_mode {
        return Ok(url.to_string());
    }
    // Let sqlx decode the path exactly as it will when it opens the file.
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).map_err(|source| {
        StoreError::InvalidUrl {
            url: redact(url),
            source,
        }
    })?;
    if let Some(dir) = options
        .get_filename()
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let separator = if params.is_some() { '&' } else { '?' };
    Ok(format!("{url}{separator}mode=rwc"))
}

/// The URL with any password replaced by `***`, fit for logs and errors.
pub fn redact(url: &str) -> String {
    let mut shown = url.to_string();
    if let Some(start) = shown.find("://").map(|i| i + 3) {
        let authority_end = shown[start..]
            .find(['/', '?', '#'])
            .map_or(shown.len(), |i| start + i);
        if let Some(at) = shown[start..authority_end].rfind('@').map(|i| start + i) {
            if let Some(colon) = shown[start..at].find(':').map(|i| start + i) {
                shown.replace_range(colon + 1..at, "***");
            }
        }
    }
    // libpq-style `?password=...` too.
    if let Some(query) = shown.find('?') {
        let (base, params) = shown.split_at(query + 1);
        let params: Vec<String> = params
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        shown = format!("{base}{}", params.join("&"));
    }
    shown
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://u:s3cret@db:5432/x"),
            "postgres://u:***@db:5432/x"
        );
        assert_eq!(redact("postgres://u@db/x"), "postgres://u@db/x");
        assert_eq!(
            redact("postgres://db/x?user=u&password=s3cret&sslmode=require"),
            "postgres://db/x?user=u&password=***&sslmode=require"
        );
        assert_eq!(
            redact("sqlite:/var/lib/t.db?mode=rwc"),
            "sqlite:/var/lib/t.db?mode=rwc"
        );
    }

    #[test]
    fn schemes_name_their_backend() {
        assert_eq!(backend_of("sqlite:t.db"), Some(Backend::Sqlite));
        assert_eq!(backend_of("sqlite://t.db"), Some(Backend::Sqlite));
        assert_eq!(backend_of("postgres://h/d"), Some(Backend::Postgres));
        assert_eq!(backend_of("postgresql://h/d"), Some(Backend::Postgres));
        assert_eq!(backend_of("mysql://h/d"), None);
        assert_eq!(backend_of("/var/lib/t.db"), None);
    }
}
