//! Recent activity for the dashboard's overview: attempts that ended in
//! each window of the last minutes, by outcome (`GET /v1/activity`).
//!
//! One `GROUP BY` over `attempts`; it reads the table without an index on
//! `finished_at_ms`, which costs a few milliseconds per 10,000 attempts and
//! runs only when someone looks at the overview.

use super::{Result, Store, StoreError};
use sqlx::Row;

/// How many attempts ended with one outcome within one window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedAttempts {
    /// The window's index, counted from `since_ms` in steps of `window_ms`.
    pub window: i64,
    /// As stored (`COMPLETED`, `FAILED`, `LEASE_LOST`...).
    pub outcome: String,
    pub count: u64,
}

const ENDED: &str =
    "SELECT (finished_at_ms - $1) / $2 AS window_index, outcome, COUNT(*) AS count \
     FROM attempts WHERE finished_at_ms >= $1 AND outcome IS NOT NULL GROUP BY 1, 2";

impl Store {
    /// Attempts that ended at or after `since_ms`, counted per window of
    /// `window_ms` and outcome.
    pub async fn ended_attempts(
        &self,
        since_ms: i64,
        window_ms: i64,
    ) -> Result<Vec<EndedAttempts>> {
        let rows = sqlx::query(ENDED)
            .bind(since_ms)
            .bind(window_ms.max(1))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("count ended attempts"))?;
        rows.iter()
            .map(|row| {
                let corrupt = |column, e: sqlx::Error| StoreError::Corrupt {
                    row: "the ended attempts".into(),
                    column,
                    reason: e.to_string(),
                };
                Ok(EndedAttempts {
                    window: row
                        .try_get::<i64, _>("window_index")
                        .map_err(|e| corrupt("window_index", e))?,
                    outcome: row
                        .try_get::<String, _>("outcome")
                        .map_err(|e| corrupt("outcome", e))?,
                    count: row
                        .try_get::<i64, _>("count")
                        .map(|n| u64::try_from(n).unwrap_or(0))
                        .map_err(|e| corrupt("count", e))?,
                })
            })
            .collect()
    }
}
