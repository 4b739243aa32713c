//! The progress history (`progress_points`): stored by the recorder
//! ([`crate::history`]), thinned past its bound, read by
//! `GET /v1/tasks/{id}/progress`.

use super::{Result, Store, StoreError};
use crate::history::bound::Stored;
use crate::model::Metrics;
use serde::Serialize;
use sqlx::Row;
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

const INSERT: &str = "INSERT INTO progress_points \
    (task_id, attempt, episode, episode_return, metrics, at_ms) VALUES ($1, $2, $3, $4, $5, $6)";

fn id(task: TaskId) -> i64 {
    i64::try_from(task).unwrap_or(i64::MAX)
}

impl Store {
    /// Stores `points` in one transaction.
    pub async fn insert_points(&self, points: &[NewPoint]) -> Result<()> {
        let what = "store progress points";
        let mut tx = self.pool.begin().await.map_err(StoreError::db(what))?;
        for p in points {
            let metrics = serde_json::to_string(&p.metrics).unwrap_or_else(|_| "{}".into());
            sqlx::query(INSERT)
                .bind(id(p.task))
                .bind(i64::from(p.attempt))
                .bind(p.episode.and_then(|e| i64::try_from(e).ok()))
                .bind(p.episode_return.filter(|r| r.is_finite()))
                .bind(metrics)
                .bind(p.at_ms)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(what))?;
        }
        tx.commit().await.map_err(StoreError::db(what))
    }

    /// How many points `task` has.
    pub async fn point_count(&self, task: TaskId) -> Result<usize> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM progress_points WHERE task_id = $1")
            .bind(id(task))
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::db("count progress points"))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Thins `task`'s history (see [`crate::history::bound`]); returns how
    /// many points it kept.
    pub async fn thin_points(&self, task: TaskId) -> Result<usize> {
        let what = "thin progress points";
        let mut tx = self.pool.begin().await.map_err(StoreError::db(what))?;
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
