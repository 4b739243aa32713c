//! Leadership on PostgreSQL: which of several masters leads, and the term
//! that fences it.
//!
//! A master leads while it holds a session-level advisory lock on a
//! connection of its own (its [`Seat`]). The server releases the lock the
//! moment that connection ends, so a leader killed outright is replaced
//! within a standby's polling interval. A leader that stops answering
//! without closing its socket (paused, cut off from the database, its
//! machine gone) loses the lock when the server ends its idle session:
//! the seat sets `idle_session_timeout` to the leader lease's TTL once it
//! leads, and the leader touches it several times per TTL.
//!
//! Taking the lock, a master raises the `leadership` row's term and
//! records itself there. The term fences every write: [`super::Store`]
//! checks it (`SELECT term ... FOR SHARE`) at the start of each write
//! transaction of a fenced store, so a deposed leader's writes are refused
//! and a new leader's term change waits for any write already under way.
//! A leader paused inside a transaction holds that share lock until the
//! server ends the transaction ([`IDLE_IN_TRANSACTION_TIMEOUT`], set on
//! every pooled connection).
//!
//! Why the database and not a consensus system: PostgreSQL already is the
//! single point every master must reach to do anything, and its locks and
//! row versions give exactly the mutual exclusion and the monotonic term
//! leadership needs.

use super::connect::redact;
use super::{Result, Store, StoreError};
use serde::Serialize;
use sqlx::{Connection, PgConnection, Row};
use std::str::FromStr;
use std::time::Duration;

/// The advisory lock's key: "trainyar" in ASCII.
pub const LEADERSHIP_LOCK_KEY: i64 = 0x7472_6169_6e79_6172;

/// How long the server lets a pooled connection sit idle inside a
/// transaction before it ends the session. A leader never waits that long
/// between two statements of one transaction unless it is stalled, and a
/// stalled leader must not hold its term's share lock against a successor.
pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest such timeout: a leader's transaction may pause this long
/// between two statements on a loaded machine without being ended.
const MIN_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(1);

/// The timeout for a master whose leader lease is `leader_ttl`: at most
/// [`IDLE_IN_TRANSACTION_TIMEOUT`], and no longer than the lease, so a
/// leader frozen inside a transaction releases its share lock by the time
/// a standby takes the lead, not later.
pub fn in_transaction_timeout(leader_ttl: Duration) -> Duration {
    IDLE_IN_TRANSACTION_TIMEOUT
        .min(leader_ttl)
        .max(MIN_IN_TRANSACTION_TIMEOUT)
}

/// Who a master is, as the others see it when it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Unique per master process.
    pub id: String,
    /// The host address hosts should dial to reach it.
    pub hosts_addr: String,
    /// The base URL of its API.
    pub api_url: String,
}

/// The leading master, as the database records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Leader {
    pub id: String,
    pub hosts_addr: String,
    pub api_url: String,
    pub term: i64,
    /// When it took the lead, in ms since the Unix epoch (the database's
    /// clock).
    pub since_ms: i64,
}

/// A master's own connection for leadership: it campaigns and, once
/// elected, holds the lock for as long as it lives.
pub struct Seat {
    conn: PgConnection,
    url: String,
}

/// The leadership a [`Seat`] won.
pub struct Held {
    seat: Seat,
    term: i64,
}

impl Seat {
    /// Connects the seat; it holds nothing yet.
    pub async fn open(url: &str) -> Result<Seat> {
        let failed = |source| StoreError::Connect {
            url: redact(url),
            source,
        };
        let options = sqlx::postgres::PgConnectOptions::from_str(url)
            .map_err(failed)?
            .application_name(&format!("trainyard-master (pid {})", std::process::id()));
        let conn = PgConnection::connect_with(&options).await.map_err(failed)?;
        Ok(Seat {
            conn,
            url: url.to_string(),
        })
    }

    /// Tries once to take the lead. Elected, the seat's session is ended
    /// by the server once idle for `ttl`, and the term is raised; else the
    /// seat comes back as it was.
    pub async fn campaign(
        mut self,
        me: &Candidate,
        ttl: Duration,
    ) -> Result<std::result::Result<Held, Seat>> {
        let action = "campaign for leadership";
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(LEADERSHIP_LOCK_KEY)
            .fetch_one(&mut self.conn)
            .await
            .map_err(StoreError::db(action))?;
        if !taken {
            return Ok(Err(self));
        }
        sqlx::query("SELECT set_config('idle_session_timeout', $1, false)")
            .bind(format!("{}ms", ttl.as_millis().max(1)))
            .execute(&mut self.conn)
            .await
            .map_err(StoreError::db(action))?;
        let term: i64 = sqlx::query_scalar(
            "UPDATE leadership SET term = term + 1, holder = $1, hosts_addr = $2, api_url = $3, \
             since_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint \
             WHERE id = 1 RETURNING term",
        )
        .bind(&me.id)
        .bind(&me.hosts_addr)
        .bind(&me.api_url)
        .fetch_one(&mut self.conn)
        .await
        .map_err(StoreError::db(action))?;
        Ok(Ok(Held { seat: self, term }))
    }

    /// The database URL, without its password.
    pub fn shown_url(&self) -> String {
        redact(&self.url)
    }
}

impl Held {
    pub fn term(&self) -> i64 {
        self.term
    }

    /// Whether this master still leads: its session is alive (so it holds
    /// the lock) and the term is its own.
    pub async fn confirm(&mut self) -> Result<()> {
        let current: i64 = sqlx::query_scalar("SELECT term FROM leadership WHERE id = 1")
            .fetch_one(&mut self.seat.conn)
            .await
            .map_err(StoreError::db("confirm leadership"))?;
        same_term(self.term, current)
    }

    /// Gives the lead up at once (the lock goes with the session).
    pub async fn resign(self) {
        let _ = self.seat.conn.close().await;
    }
}

impl Store {
    /// The master leading now, read through the pool (for the API); `None`
    /// when none leads, and on SQLite, which has no leadership.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        if self.backend != super::Backend::Postgres {
            return Ok(None);
        }
        // The row keeps the last leader after it died: it leads only while
        // the lock is held.
        let row = sqlx::query(
            "SELECT holder, hosts_addr, api_url, term, since_ms FROM leadership WHERE id = 1 \
             AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND classid::bigint = ($1 >> 32) AND objid::bigint = ($1 & 4294967295))",
        )
        .bind(LEADERSHIP_LOCK_KEY)
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db("read who leads"))?;
        Ok(row.and_then(|r| {
            Some(Leader {
                id: r.get::<Option<String>, _>(0)?,
                hosts_addr: r.get::<Option<String>, _>(1)?,
                api_url: r.get::<Option<String>, _>(2)?,
                term: r.get(3),
                since_ms: r.get::<Option<i64>, _>(4)?,
            })
        }))
    }
}

/// Refuses the transaction unless the leadership row still carries `term`;
/// the share lock it takes keeps the term from changing until the
/// transaction ends.
pub(super) async fn check_term(conn: &mut sqlx::AnyConnection, term: i64) -> Result<()> {
    let current: i64 = sqlx::query_scalar("SELECT term FROM leadership WHERE id = 1 FOR SHARE")
        .fetch_one(conn)
        .await
        .map_err(StoreError::db("check the leader's term"))?;
    same_term(term, current)
}

/// `Deposed` unless the stored term `current` is still `term`.
fn same_term(term: i64, current: i64) -> Result<()> {
    if current == term {
        Ok(())
    } else {
        Err(StoreError::Deposed { term, current })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_transaction_is_ended_within_the_leader_lease() {
        let s = Duration::from_secs;
        assert_eq!(in_transaction_timeout(s(10)), IDLE_IN_TRANSACTION_TIMEOUT);
        assert_eq!(in_transaction_timeout(s(3)), s(3));
        assert_eq!(
            in_transaction_timeout(Duration::from_millis(200)),
            MIN_IN_TRANSACTION_TIMEOUT
        );
    }
}
