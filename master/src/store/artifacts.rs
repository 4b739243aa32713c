//! The artifacts table: one row per complete object in the artifact
//! store, written only while the attempt that made it is its task's live
//! one (a compare-and-set on the task's attempt and status, like every
//! write of the task's own), read by the API's listing and downloads.

use super::{Result, Store, StoreError};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;
use trainyard_artifacts::ArtifactKind;
use trainyard_proto::TaskId;

/// An object to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewArtifact {
    pub task: TaskId,
    pub attempt: u32,
    pub kind: ArtifactKind,
    /// The file's path relative to the workspace.
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// The object's key in the store.
    pub location: String,
}

/// A recorded artifact, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Artifact {
    pub id: i64,
    pub task: TaskId,
    pub attempt: u32,
    pub kind: ArtifactKind,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// The object's key in the store.
    pub location: String,
    pub created_at_ms: i64,
}

const COLUMNS: &str = "id, task_id, attempt, kind, name, size, sha256, location, created_at_ms";

/// Only while `attempt` is the task's live attempt: an attempt given up
/// (its lease lapsed, the task requeued or ended) records nothing.
const RECORD: &str = "INSERT INTO artifacts \
    (task_id, attempt, kind, name, size, sha256, location, created_at_ms) \
    SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM tasks \
    WHERE id = $9 AND attempt = $10 AND status IN ('DISPATCHED', 'RUNNING')) \
    RETURNING id";

fn id_of(task: TaskId) -> i64 {
    i64::try_from(task).unwrap_or(i64::MAX)
}

fn artifact(row: &AnyRow) -> Result<Artifact> {
    let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
        row: format!(
            "artifact {}",
            row.try_get::<i64, _>("id").unwrap_or_default()
        ),
        column,
        reason,
    };
    let get_i64 = |column: &'static str| -> Result<i64> {
        row.try_get::<i64, _>(column)
            .map_err(|e| corrupt(column, e.to_string()))
    };
    let get_text = |column: &'static str| -> Result<String> {
        row.try_get::<String, _>(column)
            .map_err(|e| corrupt(column, e.to_string()))
    };
    let kind = get_text("kind")?;
    Ok(Artifact {
        id: get_i64("id")?,
        task: TaskId::try_from(get_i64("task_id")?)
            .map_err(|e| corrupt("task_id", e.to_string()))?,
        attempt: u32::try_from(get_i64("attempt")?)
            .map_err(|e| corrupt("attempt", e.to_string()))?,
        kind: ArtifactKind::parse(&kind)
            .ok_or_else(|| corrupt("kind", format!("unknown kind {kind:?}")))?,
        name: get_text("name")?,
        size: u64::try_from(get_i64("size")?).map_err(|e| corrupt("size", e.to_string()))?,
        sha256: get_text("sha256")?,
        location: get_text("location")?,
        created_at_ms: get_i64("created_at_ms")?,
    })
}

impl Store {
    /// Records a complete object of `new.attempt`; its id, or `None` when
    /// that attempt is no longer its task's live one (nothing recorded).
    pub async fn record_artifact(&self, new: &NewArtifact, now_ms: i64) -> Result<Option<i64>> {
        let what = "record an artifact";
        let mut tx = self.write_tx(what).await?;
        let row = sqlx::query(RECORD)
            .bind(id_of(new.task))
            .bind(i64::from(new.attempt))
            .bind(new.kind.as_str())
            .bind(new.name.as_str())
            .bind(i64::try_from(new.size).unwrap_or(i64::MAX))
            .bind(new.sha256.as_str())
            .bind(new.location.as_str())
            .bind(now_ms)
            .bind(id_of(new.task))
            .bind(i64::from(new.attempt))
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(what))?;
        let id = row
            .map(|r| r.try_get::<i64, _>(0))
            .transpose()
            .map_err(StoreError::db(what))?;
        tx.commit().await.map_err(StoreError::db(what))?;
        Ok(id)
    }

    /// `task`'s artifacts, oldest first.
    pub async fn artifacts(&self, task: TaskId) -> Result<Vec<Artifact>> {
        let what = "list artifacts";
        let sql = format!("SELECT {COLUMNS} FROM artifacts WHERE task_id = $1 ORDER BY id");
        let rows = sqlx::query(&sql)
            .bind(id_of(task))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(what))?;
        rows.iter().map(artifact).collect()
    }

    /// One artifact of `task`.
    pub async fn artifact(&self, task: TaskId, id: i64) -> Result<Option<Artifact>> {
        let what = "read an artifact";
        let sql = format!("SELECT {COLUMNS} FROM artifacts WHERE task_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(id_of(task))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(what))?;
        row.as_ref().map(artifact).transpose()
    }

    /// The attempt of `task` that is live now (DISPATCHED or RUNNING), if
    /// any: an upload from another is refused before its bytes are read.
    pub async fn live_attempt(&self, task: TaskId) -> Result<Option<u32>> {
        let what = "read a task's live attempt";
        let row = sqlx::query(
            "SELECT attempt FROM tasks WHERE id = $1 AND status IN ('DISPATCHED', 'RUNNING')",
        )
        .bind(id_of(task))
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::db(what))?;
        row.map(|r| r.try_get::<i64, _>(0))
            .transpose()
            .map_err(StoreError::db(what))
            .map(|a| a.and_then(|a| u32::try_from(a).ok()))
    }
}
