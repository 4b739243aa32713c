//! Captured log lines (`log_lines`) and the count of lines dropped per
//! attempt (`log_drops`): written by the log recorder ([`crate::logs`]) in
//! batches, trimmed past the bound ([`crate::logs::bound`]), read by
//! `GET /v1/tasks/{id}/logs`.

use super::values::{self, Col, Param};
use super::{Result, Store, StoreError};
use crate::logs::bound::{self, Sized};
use serde::Serialize;
use sqlx::Row;
use std::collections::HashMap;
use trainyard_proto::messages::LogStream;
use trainyard_proto::TaskId;

/// A line to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLogLine {
    pub task: TaskId,
    pub attempt: u32,
    pub stream: LogStream,
    pub at_ms: i64,
    pub text: String,
}

/// A stored line, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLineView {
    pub attempt: u32,
    /// Increasing within a task; the `after` cursor.
    pub seq: i64,
    pub stream: LogStream,
    pub at_ms: i64,
    pub text: String,
}

/// Lines dropped for one attempt, by its host or by the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogDrops {
    pub attempt: u32,
    pub dropped: u64,
}

/// Which lines to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRead {
    /// Only this attempt's.
    pub attempt: Option<u32>,
    /// The first `limit` lines after this seq; without it, the last `limit`.
    pub after: Option<i64>,
    pub limit: u32,
}

/// Most lines one read returns.
pub const MAX_READ: u32 = 10_000;

// Ordered by `v_n`, so ids follow the batch's order on both backends;
// lines of a task that does not exist (padding rows included) are skipped.
const INSERT: &str =
    "WITH v(v_n, v_task, v_attempt, v_stream, v_at, v_text, v_bytes) AS (VALUES {values}) \
    INSERT INTO log_lines (task_id, attempt, stream, at_ms, text, bytes) \
    SELECT v_task, v_attempt, v_stream, v_at, v_text, v_bytes FROM v \
    WHERE EXISTS (SELECT 1 FROM tasks WHERE tasks.id = v_task) ORDER BY v_n";

const SIZES: &str = "WITH v(v_task, v_attempt) AS (VALUES {values}) \
    SELECT v_task, v_attempt, \
    (SELECT COUNT(*) FROM log_lines WHERE task_id = v_task AND attempt = v_attempt), \
    (SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM log_lines \
     WHERE task_id = v_task AND attempt = v_attempt) \
    FROM v WHERE v_task IS NOT NULL";

const ADD_DROPS: &str = "INSERT INTO log_drops (task_id, attempt, dropped) \
    SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM tasks WHERE id = $4) \
    ON CONFLICT (task_id, attempt) DO UPDATE SET dropped = log_drops.dropped + excluded.dropped";

fn id(task: TaskId) -> i64 {
    i64::try_from(task).unwrap_or(i64::MAX)
}

fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

impl Store {
    /// Stores `lines` (in order) and adds `drops` (task, attempt, lines) to
    /// the drop counts, in one transaction.
    pub async fn insert_log_lines(
        &self,
        lines: &[NewLogLine],
        drops: &[(TaskId, u32, u64)],
    ) -> Result<()> {
        let what = "store log lines";
        let mut tx = self.write_tx(what).await?;
        let rows: Vec<Vec<Param<'_>>> = lines
            .iter()
            .enumerate()
            .map(|(n, l)| {
                vec![
                    Param::int(n as i64),
                    Param::int(id(l.task)),
                    Param::int(l.attempt),
                    Param::text(l.stream.as_str()),
                    Param::int(l.at_ms),
                    Param::text(&l.text),
                    Param::int(l.text.len() as i64),
                ]
            })
            .collect();
        let cols = [
            Col::Int,
            Col::Int,
            Col::Int,
            Col::Text,
            Col::Int,
            Col::Text,
            Col::Int,
        ];
        if !rows.is_empty() {
            values::run(&mut tx, self.backend, INSERT, &cols, &rows, None)
                .await
                .map_err(StoreError::db(what))?;
        }
        for &(task, attempt, dropped) in drops.iter().filter(|d| d.2 > 0) {
            add_drops(&mut tx, task, attempt, dropped)
                .await
                .map_err(StoreError::db(what))?;
        }
        tx.commit().await.map_err(StoreError::db(what))
    }

    /// How many lines and bytes `attempt` of `task` holds.
    pub async fn log_size(&self, task: TaskId, attempt: u32) -> Result<(usize, usize)> {
        Ok(self
            .log_sizes(&[(task, attempt)])
            .await?
            .get(&(task, attempt))
            .copied()
            .unwrap_or_default())
    }

    /// How many lines and bytes each of these attempts (task, attempt)
    /// holds, many attempts per statement.
    pub async fn log_sizes(
        &self,
        attempts: &[(TaskId, u32)],
    ) -> Result<HashMap<(TaskId, u32), (usize, usize)>> {
        let what = "measure log lines";
        let rows: Vec<Vec<Param<'_>>> = attempts
            .iter()
            .map(|&(task, attempt)| vec![Param::int(id(task)), Param::int(attempt)])
            .collect();
        if rows.is_empty() {
            return Ok(HashMap::new());
        }
        let mut conn = self.pool.acquire().await.map_err(StoreError::db(what))?;
        let found = values::run(
            &mut conn,
            self.backend,
            SIZES,
            &[Col::Int, Col::Int],
            &rows,
            None,
        )
        .await
        .map_err(StoreError::db(what))?;
        found
            .iter()
            .map(|r| {
                let (task, attempt): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
                let (n, b): (i64, i64) = (r.try_get(2)?, r.try_get(3)?);
                let key = (
                    TaskId::try_from(task).unwrap_or_default(),
                    u32::try_from(attempt).unwrap_or_default(),
                );
                Ok((key, (count(n), count(b))))
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(StoreError::db(what))
    }

    /// Deletes `attempt`'s oldest lines past the bound and counts them
    /// dropped; returns the lines and bytes it keeps.
    pub async fn trim_log(&self, task: TaskId, attempt: u32) -> Result<(usize, usize)> {
        let what = "trim log lines";
        let mut tx = self.write_tx(what).await?;
        let rows = sqlx::query(
            "SELECT id, bytes FROM log_lines WHERE task_id = $1 AND attempt = $2 ORDER BY id",
        )
        .bind(id(task))
        .bind(i64::from(attempt))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(what))?;
        let sized: Vec<Sized> = rows
            .iter()
            .map(|r| {
                let bytes: i64 = r.try_get("bytes")?;
                Ok(Sized {
                    id: r.try_get("id")?,
                    bytes: count(bytes),
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(StoreError::db(what))?;
        let total: usize = sized.iter().map(|s| s.bytes).sum();
        let Some(trim) = bound::trim(&sized) else {
            return Ok((sized.len(), total));
        };
        sqlx::query("DELETE FROM log_lines WHERE task_id = $1 AND attempt = $2 AND id <= $3")
            .bind(id(task))
            .bind(i64::from(attempt))
            .bind(trim.through)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(what))?;
        add_drops(&mut tx, task, attempt, trim.lines as u64)
            .await
            .map_err(StoreError::db(what))?;
        tx.commit().await.map_err(StoreError::db(what))?;
        Ok((sized.len() - trim.lines, total - trim.bytes))
    }

    /// `task`'s lines per `read`, oldest first.
    pub async fn log_lines(&self, task: TaskId, read: LogRead) -> Result<Vec<LogLineView>> {
        let what = "read log lines";
        let attempt = if read.attempt.is_some() {
            "AND attempt = $2"
        } else {
            "AND $2 = 0"
        };
        let (cursor, order) = match read.after {
            Some(_) => ("AND id > $3", "ASC"),
            None => ("AND $3 = 0", "DESC"),
        };
        let sql = format!(
            "SELECT id, attempt, stream, at_ms, text FROM log_lines \
             WHERE task_id = $1 {attempt} {cursor} ORDER BY id {order} LIMIT $4"
        );
        let rows = sqlx::query(&sql)
            .bind(id(task))
            .bind(i64::from(read.attempt.unwrap_or(0)))
            .bind(read.after.unwrap_or(0))
            .bind(i64::from(read.limit.clamp(1, MAX_READ)))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(what))?;
        let mut lines = rows
            .iter()
            .map(|r| {
                let attempt: i64 = r.try_get("attempt")?;
                let stream: String = r.try_get("stream")?;
                Ok(LogLineView {
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    seq: r.try_get("id")?,
                    stream: LogStream::parse(&stream).unwrap_or(LogStream::Adapter),
                    at_ms: r.try_get("at_ms")?,
                    text: r.try_get("text")?,
                })
            })
            .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
            .map_err(StoreError::db(what))?;
        if read.after.is_none() {
            lines.reverse();
        }
        Ok(lines)
    }

    /// Lines dropped per attempt of `task` (only `attempt`'s if given).
    pub async fn log_drops(&self, task: TaskId, attempt: Option<u32>) -> Result<Vec<LogDrops>> {
        let what = "read log drops";
        let sql = match attempt {
            Some(_) => "SELECT attempt, dropped FROM log_drops WHERE task_id = $1 AND attempt = $2 ORDER BY attempt",
            None => "SELECT attempt, dropped FROM log_drops WHERE task_id = $1 AND $2 = 0 ORDER BY attempt",
        };
        let rows = sqlx::query(sql)
            .bind(id(task))
            .bind(i64::from(attempt.unwrap_or(0)))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(what))?;
        rows.iter()
            .map(|r| {
                let attempt: i64 = r.try_get("attempt")?;
                let dropped: i64 = r.try_get("dropped")?;
                Ok(LogDrops {
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    dropped: u64::try_from(dropped).unwrap_or(0),
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(StoreError::db(what))
    }
}

async fn add_drops(
    conn: &mut sqlx::AnyConnection,
    task: TaskId,
    attempt: u32,
    dropped: u64,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::query(ADD_DROPS)
        .bind(id(task))
        .bind(i64::from(attempt))
        .bind(i64::try_from(dropped).unwrap_or(i64::MAX))
        .bind(id(task))
        .execute(conn)
        .await
        .map(|_| ())
}
