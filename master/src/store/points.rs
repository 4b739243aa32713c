//! The progress history (`progress_points`): stored with the scheduler's
//! turn that heard the points ([`super::Batch::points`]), thinned past its
//! bound ([`crate::history`]), read by `GET /v1/tasks/{id}/progress`.

use super::values::{self, Col, Param};
use super::{Result, Store, StoreError};
use crate::history::bound::Stored;
use crate::model::Metrics;
use serde::Serialize;
use sqlx::Row;
use std::collections::HashMap;
use trainyard_proto::TaskId;

/// One stored progress point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgressPoint {
    /// Increasing with time within a task; the `after` cursor.
    pub id: i64,
    pub attempt: u32,
    pub episode: Option<u64>,
    pub episode_return: Option<f64>,
    pub metrics: Metrics,
    pub at_ms: i64,
}

/// A point to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewPoint {
    pub task: TaskId,
    pub attempt: u32,
    pub episode: Option<u64>,
    pub episode_return: Option<f64>,
    pub metrics: Metrics,
    pub at_ms: i64,
}

/// Most points one read returns.
pub const MAX_READ: u32 = 10_000;

// Ordered by `v_n`, so ids follow the batch's order on both backends;
// padding rows (NULL task) are skipped. A return is stored only where
// `v_has_return` is 1 (a `Col::Real` is never bound NULL).
const INSERT: &str = "WITH v(v_n, v_task, v_attempt, v_episode, v_has_return, v_return, \
    v_metrics, v_at) AS (VALUES {values}) \
    INSERT INTO progress_points (task_id, attempt, episode, episode_return, metrics, at_ms) \
    SELECT v_task, v_attempt, v_episode, CASE WHEN v_has_return = 1 THEN v_return END, \
    v_metrics, v_at FROM v WHERE v_task IS NOT NULL ORDER BY v_n";
const COUNT: &str = "WITH v(v_task) AS (VALUES {values}) \
    SELECT v_task, (SELECT COUNT(*) FROM progress_points WHERE task_id = v_task) FROM v \
    WHERE v_task IS NOT NULL";
const INSERT_COLS: [Col; 8] = [
    Col::Int,
    Col::Int,
    Col::Int,
    Col::Int,
    Col::Int,
    Col::Real,
    Col::Text,
    Col::Int,
];

fn id(task: TaskId) -> i64 {
    i64::try_from(task).unwrap_or(i64::MAX)
}

/// Stores `points` on `conn`, within the caller's transaction (the
/// scheduler's turn, see [`super::Batch::points`]), many rows per
/// statement.
pub(super) async fn insert(
    conn: &mut sqlx::AnyConnection,
    backend: super::Backend,
    points: &[NewPoint],
) -> Result<()> {
    let metrics: Vec<String> = points
        .iter()
        .map(|p| serde_json::to_string(&p.metrics).unwrap_or_else(|_| "{}".into()))
        .collect();
    let rows: Vec<Vec<Param<'_>>> = points
        .iter()
        .zip(&metrics)
        .enumerate()
        .map(|(n, (p, metrics))| {
            let episode_return = p.episode_return.filter(|r| r.is_finite());
            vec![
                Param::int(n as i64),
                Param::int(id(p.task)),
                Param::int(p.attempt),
                Param::Int(p.episode.and_then(|e| i64::try_from(e).ok())),
                Param::int(i64::from(episode_return.is_some())),
                Param::Real(episode_return.unwrap_or(0.0)),
                Param::text(metrics),
                Param::int(p.at_ms),
            ]
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    values::run(conn, backend, INSERT, &INSERT_COLS, &rows, None)
        .await
        .map_err(StoreError::db("store progress points"))?;
    Ok(())
}

impl Store {
    /// Stores `points` in one transaction, many rows per statement.
    pub async fn insert_points(&self, points: &[NewPoint]) -> Result<()> {
        if points.is_empty() {
            return Ok(());
        }
        let what = "store progress points";
        let mut tx = self.write_tx(what).await?;
        insert(&mut tx, self.backend, points).await?;
        tx.commit().await.map_err(StoreError::db(what))
    }

    /// How many points `task` has.
    pub async fn point_count(&self, task: TaskId) -> Result<usize> {
        Ok(self
            .point_counts(&[task])
            .await?
            .get(&task)
            .copied()
            .unwrap_or(0))
    }

    /// How many points each of `tasks` has, many tasks per statement.
    pub async fn point_counts(&self, tasks: &[TaskId]) -> Result<HashMap<TaskId, usize>> {
        let what = "count progress points";
        let rows: Vec<Vec<Param<'_>>> = tasks.iter().map(|t| vec![Param::int(id(*t))]).collect();
        if rows.is_empty() {
            return Ok(HashMap::new());
        }
        let mut conn = self.pool.acquire().await.map_err(StoreError::db(what))?;
        let found = values::run(&mut conn, self.backend, COUNT, &[Col::Int], &rows, None)
            .await
            .map_err(StoreError::db(what))?;
        found
            .iter()
            .map(|r| {
                let task: i64 = r.try_get(0)?;
                let n: i64 = r.try_get(1)?;
                Ok((
                    TaskId::try_from(task).unwrap_or_default(),
                    usize::try_from(n).unwrap_or(0),
                ))
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(StoreError::db(what))
    }

    /// Thins `task`'s history (see [`crate::history::bound`]); returns how
    /// many points it kept.
    pub async fn thin_points(&self, task: TaskId) -> Result<usize> {
        let what = "thin progress points";
        let mut tx = self.write_tx(what).await?;
        let rows = sqlx::query(
            "SELECT id, episode_return FROM progress_points WHERE task_id = $1 ORDER BY id",
        )
        .bind(id(task))
        .fetch_all(&mut *tx)
        .await
        .map_err(StoreError::db(what))?;
        let stored: Vec<Stored> = rows
            .iter()
            .map(|r| {
                Ok(Stored {
                    id: r.try_get("id")?,
                    episode_return: r.try_get("episode_return")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(StoreError::db(what))?;
        let delete = crate::history::bound::thin(&stored);
        for id in &delete {
            sqlx::query("DELETE FROM progress_points WHERE id = $1")
                .bind(*id)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(what))?;
        }
        tx.commit().await.map_err(StoreError::db(what))?;
        Ok(stored.len() - delete.len())
    }

    /// `task`'s points after the point `after` (0: from the first), oldest
    /// first, at most `limit` (capped at [`MAX_READ`]).
    pub async fn points(&self, task: TaskId, after: i64, limit: u32) -> Result<Vec<ProgressPoint>> {
        let what = "read progress points";
        let rows = sqlx::query(
            "SELECT id, attempt, episode, episode_return, metrics, at_ms FROM progress_points \
             WHERE task_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(id(task))
        .bind(after)
        .bind(i64::from(limit.clamp(1, MAX_READ)))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db(what))?;
        rows.iter()
            .map(|r| {
                let metrics: String = r.try_get("metrics")?;
                let attempt: i64 = r.try_get("attempt")?;
                let episode: Option<i64> = r.try_get("episode")?;
                Ok(ProgressPoint {
                    id: r.try_get("id")?,
                    attempt: u32::try_from(attempt).unwrap_or(0),
                    episode: episode.and_then(|e| u64::try_from(e).ok()),
                    episode_return: r.try_get("episode_return")?,
                    metrics: serde_json::from_str(&metrics).unwrap_or_default(),
                    at_ms: r.try_get("at_ms")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(StoreError::db(what))
    }
}
