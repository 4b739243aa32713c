//! The task store: tasks, their attempts and the hosts seen, kept in SQLite
//! or PostgreSQL through sqlx's `Any` driver, so one set of queries serves
//! both.
//!
//! The database is the truth for a task. Every write in a [`Batch`] is a
//! compare-and-set on the task's current `status` and `attempt`, so the write
//! of an actor that lost the race (a stale report, a duplicate dispatch)
//! changes nothing and comes back as not applied; that is how the system's
//! fencing reaches the database. A batch commits in one transaction.
//!
//! # Layout
//! - `connect`: URLs, connection settings, running the migrations.
//! - `migrations`: the migration files, embedded.
//! - `lock`: one master per SQLite database ([`MasterLock`]).
//! - `leadership`: which master leads on PostgreSQL, and the term that
//!   fences its writes ([`Seat`], [`Held`]).
//! - `batch`: the write types, and how a batch is grouped into statements.
//! - `apply`, `statements`: the batch transaction and its SQL.
//! - `values`: multi-row `VALUES` statements, chunked and padded.
//! - `read`: the queries the scheduler and the API make.
//! - `rows`, `json`: decoding rows, and the JSON columns.
//! - `sweeps`: sweeps with their trials, and early stopping's records.
//! - `activity`: attempts ended per minute, for the dashboard.
//! - `points`, `logs`: the progress history and the captured log lines.
//! - `artifacts`: the objects hosts stored, recorded once complete.
//! - `access`: teams, API tokens (their digests) and the audit log.

mod access;
mod activity;
mod apply;
mod artifacts;
mod batch;
mod connect;
mod json;
mod leadership;
mod lock;
mod logs;
mod migrations;
mod points;
mod read;
mod rows;
mod statements;
mod sweeps;
mod values;

#[cfg(test)]
mod tests;

pub use access::{AuditEntry, NewAuditEntry, NewToken, TeamRecord, TokenError};
pub use activity::EndedAttempts;
pub use apply::Executed;
pub use artifacts::{Artifact, NewArtifact};
pub use batch::{Batch, BatchResult, Next, Write};
pub use connect::backend_of;
/// A database or Redis URL with its password replaced by `***`.
pub use connect::redact as redact_url;
pub use leadership::{Candidate, Held, Leader, Seat};
pub use lock::{LockError, MasterLock};
pub use logs::{LogDrops, LogLineView, LogRead, NewLogLine, MAX_READ as MAX_LOG_READ};
pub use points::{NewPoint, ProgressPoint, MAX_READ as MAX_POINTS_READ};
pub use read::{DispatchPayload, LiveTask, QueuedTask, TaskFilter};
pub use sweeps::{StoredSweep, SweepInsert};

use sqlx::AnyPool;
use std::sync::Arc;

/// The database behind a [`Store`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Why the task store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "unsupported database URL {url:?}: use sqlite:<path> (e.g. sqlite:/var/lib/trainyard/tasks.db) \
         or postgres://<user>@<host>/<database> (also postgresql://)"
    )]
    UnsupportedUrl { url: String },
    #[error("invalid database URL {url}: {source}")]
    InvalidUrl { url: String, source: sqlx::Error },
    #[error("cannot create the directory {path} for the SQLite database: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot connect to the database at {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error("cannot bring the database schema at {url} up to date: {source}")]
    Migrate {
        url: String,
        source: sqlx::migrate::MigrateError,
    },
    #[error("task store: cannot {action}: {source}")]
    Database {
        action: &'static str,
        source: sqlx::Error,
    },
    /// A stored value this version cannot read: a bug, or a hand-edited row.
    #[error("task store: {row} has an unreadable {column}: {reason}")]
    Corrupt {
        row: String,
        column: &'static str,
        reason: String,
    },
    #[error(transparent)]
    Lock(#[from] LockError),
    /// This master's term has ended: another master leads now.
    #[error("this master no longer leads: its term is {term}, the database's {current}")]
    Deposed { term: i64, current: i64 },
    #[error("task store: cannot encode {what} as JSON: {source}")]
    Encode {
        what: &'static str,
        source: serde_json::Error,
    },
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// Wraps a database error with what the store was doing.
    fn db(action: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Database { action, source }
    }
}

/// The master's handle on its database. Cheap to clone: the pool is shared.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    /// The leader's term every write checks first; `None` when unfenced
    /// (SQLite, reads).
    fence: Option<Arc<Fence>>,
}

/// A leader's term, and the signal that a write found it ended.
#[derive(Debug)]
pub struct Fence {
    pub term: i64,
    /// Notified when a write was refused because the term ended.
    pub deposed: tokio::sync::Notify,
}

impl Store {
    /// Connects to `url` (`sqlite:` or `postgres:`/`postgresql:`) and brings
    /// the schema up to date.
    pub async fn connect(url: &str) -> Result<Store> {
        Self::connect_with(url, leadership::IDLE_IN_TRANSACTION_TIMEOUT).await
    }

    /// [`Store::connect`] for a master that may lead on PostgreSQL with a
    /// leader lease of `leader_ttl`: a connection stalled inside a
    /// transaction is ended within the lease
    /// ([`leadership::in_transaction_timeout`]).
    pub async fn connect_leading(url: &str, leader_ttl: std::time::Duration) -> Result<Store> {
        Self::connect_with(url, leadership::in_transaction_timeout(leader_ttl)).await
    }

    async fn connect_with(url: &str, in_transaction: std::time::Duration) -> Result<Store> {
        let (pool, backend) = connect::open(url, in_transaction).await?;
        Ok(Store {
            pool,
            backend,
            fence: None,
        })
    }

    /// The same store, with every write transaction refused unless the
    /// leadership row still carries `term` (PostgreSQL).
    pub fn fenced(&self, term: i64) -> (Store, Arc<Fence>) {
        let fence = Arc::new(Fence {
            term,
            deposed: tokio::sync::Notify::new(),
        });
        let store = Store {
            fence: Some(fence.clone()),
            ..self.clone()
        };
        (store, fence)
    }

    /// The term this store's writes are fenced by; 0 when nothing fences
    /// them (SQLite, one master).
    pub fn term(&self) -> i64 {
        self.fence.as_ref().map_or(0, |f| f.term)
    }

    /// Begins a write transaction: for a fenced store, its first statement
    /// checks the term.
    pub(crate) async fn write_tx(
        &self,
        action: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.pool.begin().await.map_err(StoreError::db(action))?;
        if let Some(fence) = &self.fence {
            if let Err(e) = leadership::check_term(&mut tx, fence.term).await {
                if matches!(e, StoreError::Deposed { .. }) {
                    fence.deposed.notify_one();
                }
                return Err(e);
            }
        }
        Ok(tx)
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes every connection; later calls fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Whether the database answers a trivial query.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(StoreError::db("reach the database"))
    }

    /// Runs the whole batch in one transaction: the inserts first (their ids
    /// come back in order), then the writes, each reporting whether it
    /// applied. Any database error rolls the whole batch back.
    pub async fn apply(&self, batch: &Batch) -> Result<BatchResult> {
        self.execute(batch).await?.commit().await
    }

    /// Runs the batch's statements in a transaction left open: the returned
    /// [`Executed`] commits it, or rolls it back when dropped. Rows the batch
    /// changed stay locked until then. On PostgreSQL a later batch's write
    /// to such a row waits for this one's commit and then sees its effects,
    /// but only where the row as last committed already met the write's
    /// condition; elsewhere the write does not apply.
    pub async fn execute(&self, batch: &Batch) -> Result<Executed> {
        apply::execute(self, batch).await
    }
}
