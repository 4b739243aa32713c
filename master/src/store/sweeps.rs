//! Sweeps in the store: inserted inside a batch with their trials' tasks,
//! read with their trials' task states, cancelled, and the early-stopping
//! records (milestone values, stop marks).

use super::values::{self, Col, Param};
use super::{rows, Backend, Result, Store, StoreError};
use crate::search::{NewSweep, SweepId, SweepRecord, TrialRow};
use serde_json::{Map, Value};
use sqlx::{AnyConnection, Row};
use std::collections::{BTreeMap, BTreeSet};
use trainyard_proto::TaskId;

/// A sweep of a batch, whose trials are `inserts[first..first + trials]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepInsert {
    pub sweep: NewSweep,
    pub first: usize,
}

const INSERT_TRIALS: &str = "WITH v(v_sweep, v_task, v_config, v_seed) AS (VALUES {values}) \
     INSERT INTO sweep_trials (sweep_id, task_id, config, seed) \
     SELECT v_sweep, v_task, v_config, v_seed FROM v WHERE v_sweep IS NOT NULL";

/// Inserts the batch's sweeps and links their trials to the tasks just
/// inserted (`inserted`, aligned with the batch's inserts); returns the
/// sweeps' ids in order. Runs inside the batch transaction.
pub(super) async fn insert(
    conn: &mut AnyConnection,
    backend: Backend,
    now: i64,
    sweeps: &[SweepInsert],
    inserted: &[TaskId],
) -> Result<Vec<SweepId>> {
    let action = "record a sweep";
    let mut ids = Vec::with_capacity(sweeps.len());
    for s in sweeps {
        let n = &s.sweep;
        let id: i64 = sqlx::query(
            "INSERT INTO sweeps (name, adapter, kind, spec, configs, metric, direction, created_at_ms, \
             team) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(n.name.as_deref().map(|s| s.replace('\0', "\u{FFFD}")))
        .bind(&n.adapter)
        .bind(&n.kind)
        .bind(n.spec.replace('\0', "\u{FFFD}"))
        .bind(n.configs.replace('\0', "\u{FFFD}"))
        .bind(&n.metric)
        .bind(n.direction.as_str())
        .bind(now)
        .bind(&n.team)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::db(action))?
        .try_get(0)
        .map_err(StoreError::db(action))?;
        let tasks = inserted
            .get(s.first..s.first + n.trials.len())
            .ok_or_else(|| StoreError::Database {
                action,
                source: sqlx::Error::Protocol("a sweep's trials are missing from its batch".into()),
            })?;
        let rows: Vec<Vec<Param>> = tasks
            .iter()
            .zip(&n.trials)
            .map(|(task, (config, seed))| {
                vec![
                    Param::int(id),
                    Param::Int(Some(*task as i64)),
                    Param::Int(Some(*config as i64)),
                    Param::int(*seed),
                ]
            })
            .collect();
        let cols = [Col::Int, Col::Int, Col::Int, Col::Int];
        values::run(conn, backend, INSERT_TRIALS, &cols, &rows, None)
            .await
            .map_err(StoreError::db(action))?;
        ids.push(id as SweepId);
    }
    Ok(ids)
}

/// A sweep as `GET /v1/sweeps/{id}` needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredSweep {
    pub record: SweepRecord,
    pub spec: Value,
    pub configs: Vec<Map<String, Value>>,
    pub trials: Vec<TrialRow>,
}

fn trials_sql(condition: &str) -> String {
    format!(
        "SELECT st.sweep_id, {} FROM sweep_trials st JOIN tasks t ON t.id = st.task_id \
         WHERE {condition} ORDER BY st.sweep_id, st.task_id",
        rows::TRIAL_COLUMNS
    )
}

impl Store {
    /// Sweeps newest first (at most `limit`, before the id `before`), each
    /// with its trials.
    /// Only `team`'s when given.
    pub async fn sweeps(
        &self,
        limit: u32,
        before: Option<SweepId>,
        team: Option<&str>,
    ) -> Result<Vec<(SweepRecord, Vec<TrialRow>)>> {
        let action = "list sweeps";
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let sql = format!(
            "SELECT {} FROM sweeps WHERE id < $1 AND {} ORDER BY id DESC LIMIT $3",
            rows::SWEEP_COLUMNS,
            if team.is_some() {
                "team = $2"
            } else {
                "$2 = ''"
            }
        );
        let found = sqlx::query(&sql)
            .bind(before)
            .bind(team.unwrap_or(""))
            .bind(i64::from(limit.clamp(1, 1000)))
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(action))?;
        let records = found.iter().map(rows::sweep).collect::<Result<Vec<_>>>()?;
        let (Some(low), Some(high)) = (records.last(), records.first()) else {
            return Ok(vec![]);
        };
        let found = sqlx::query(&trials_sql("st.sweep_id >= $1 AND st.sweep_id <= $2"))
            .bind(low.id as i64)
            .bind(high.id as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db(action))?;
        let mut by_sweep: BTreeMap<SweepId, Vec<TrialRow>> = BTreeMap::new();
        for row in &found {
            let sweep: i64 = row.try_get(0).map_err(StoreError::db(action))?;
            by_sweep
                .entry(sweep as SweepId)
                .or_default()
                .push(rows::trial(row)?);
        }
        Ok(records
            .into_iter()
            .map(|r| {
                let trials = by_sweep.remove(&r.id).unwrap_or_default();
                (r, trials)
            })
            .collect())
    }

    /// One sweep with its spec, configurations and trials, from one snapshot.
    pub async fn sweep(&self, id: SweepId) -> Result<Option<StoredSweep>> {
        let Ok(id) = i64::try_from(id) else {
            return Ok(None);
        };
        let action = "read a sweep";
        let mut tx = self.snapshot(action).await?;
        let sql = format!(
            "SELECT {}, spec, configs FROM sweeps WHERE id = $1",
            rows::SWEEP_COLUMNS
        );
        let Some(row) = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(action))?
        else {
            return Ok(None);
        };
        let record = rows::sweep(&row)?;
        let text = |column: &'static str| -> Result<String> {
            row.try_get::<String, _>(column)
                .map_err(StoreError::db(action))
        };
        let corrupt = |column: &'static str| {
            move |e: serde_json::Error| StoreError::Corrupt {
                row: format!("sweep {id}"),
                column,
                reason: e.to_string(),
            }
        };
        let spec: Value = serde_json::from_str(&text("spec")?).map_err(corrupt("spec"))?;
        let configs: Vec<Map<String, Value>> =
            serde_json::from_str(&text("configs")?).map_err(corrupt("configs"))?;
        let found = sqlx::query(&trials_sql("st.sweep_id = $1"))
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(action))?;
        tx.commit().await.map_err(StoreError::db(action))?;
        let trials = found.iter().map(rows::trial).collect::<Result<Vec<_>>>()?;
        Ok(Some(StoredSweep {
            record,
            spec,
            configs,
            trials,
        }))
    }

    /// Marks a sweep cancelled (once; a second call keeps the first time).
    /// Returns false when there is no such sweep.
    pub async fn cancel_sweep(&self, id: SweepId, now_ms: i64) -> Result<bool> {
        let Ok(id) = i64::try_from(id) else {
            return Ok(false);
        };
        let mut tx = self.write_tx("cancel a sweep").await?;
        let done = sqlx::query(
            "UPDATE sweeps SET cancelled_at_ms = COALESCE(cancelled_at_ms, $1) WHERE id = $2",
        )
        .bind(now_ms)
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("cancel a sweep"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("cancel a sweep"))?;
        Ok(done.rows_affected() > 0)
    }

    /// The unfinished trials of cancelled sweeps: what a cancellation that
    /// was cut short still has to stop.
    pub async fn unfinished_trials_of_cancelled_sweeps(&self) -> Result<Vec<TaskId>> {
        let found = sqlx::query(
            "SELECT st.task_id FROM sweep_trials st JOIN sweeps s ON s.id = st.sweep_id \
             JOIN tasks t ON t.id = st.task_id \
             WHERE s.cancelled_at_ms IS NOT NULL \
             AND t.ended IS NULL ORDER BY st.task_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("read the trials of cancelled sweeps"))?;
        found
            .iter()
            .map(|r| r.try_get::<i64, _>(0).map(|id| id as TaskId))
            .collect::<Result<_, _>>()
            .map_err(StoreError::db("read the trials of cancelled sweeps"))
    }

    /// The result metrics an adapter's latest completed tasks reported
    /// (empty when none completed yet).
    pub async fn reported_metrics(&self, adapter: &str) -> Result<BTreeSet<String>> {
        let found = sqlx::query(
            "SELECT result FROM tasks WHERE adapter = $1 AND status = 'COMPLETED' \
             AND result IS NOT NULL ORDER BY id DESC LIMIT 50",
        )
        .bind(adapter)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("read an adapter's results"))?;
        let mut names = BTreeSet::new();
        for row in &found {
            let text: String = row.try_get(0).map_err(StoreError::db("read a result"))?;
            if let Ok(result) = serde_json::from_str::<crate::model::ResultView>(&text) {
                names.extend(result.metrics.into_keys());
            }
        }
        Ok(names)
    }

    /// Sweeps not cancelled that still have an unfinished trial.
    pub async fn running_sweeps(&self) -> Result<Vec<SweepId>> {
        let action = "read the running sweeps";
        let found = sqlx::query(
            "SELECT DISTINCT st.sweep_id FROM sweep_trials st JOIN sweeps s ON s.id = st.sweep_id \
             JOIN tasks t ON t.id = st.task_id \
             WHERE s.cancelled_at_ms IS NULL AND t.ended IS NULL \
             ORDER BY st.sweep_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db(action))?;
        found
            .iter()
            .map(|r| r.try_get::<i64, _>(0).map(|id| id as SweepId))
            .collect::<Result<_, _>>()
            .map_err(StoreError::db(action))
    }

    /// The sweep a task is a trial of, if any.
    pub async fn sweep_of(&self, task: TaskId) -> Result<Option<SweepId>> {
        let Ok(task) = i64::try_from(task) else {
            return Ok(None);
        };
        let action = "read a trial's sweep";
        let found = sqlx::query("SELECT sweep_id FROM sweep_trials WHERE task_id = $1")
            .bind(task)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::db(action))?;
        found
            .map(|r| r.try_get::<i64, _>(0).map(|id| id as SweepId))
            .transpose()
            .map_err(StoreError::db(action))
    }

    /// The recorded milestone values of a sweep's trials.
    pub async fn milestones(&self, sweep: SweepId) -> Result<BTreeMap<TaskId, BTreeMap<u64, f64>>> {
        let action = "read a sweep's milestones";
        let found = sqlx::query(
            "SELECT m.task_id, m.milestone, m.value FROM sweep_milestones m \
             JOIN sweep_trials st ON st.task_id = m.task_id WHERE st.sweep_id = $1",
        )
        .bind(sweep as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db(action))?;
        let mut out: BTreeMap<TaskId, BTreeMap<u64, f64>> = BTreeMap::new();
        for row in &found {
            let task: i64 = row.try_get(0).map_err(StoreError::db(action))?;
            let milestone: i64 = row.try_get(1).map_err(StoreError::db(action))?;
            let value: f64 = row.try_get(2).map_err(StoreError::db(action))?;
            out.entry(task as TaskId)
                .or_default()
                .insert(milestone as u64, value);
        }
        Ok(out)
    }

    /// Records a trial's signal at a milestone; the first record stays.
    pub async fn record_milestone(&self, task: TaskId, milestone: u64, value: f64) -> Result<()> {
        let mut tx = self.write_tx("record a milestone").await?;
        sqlx::query(
            "INSERT INTO sweep_milestones (task_id, milestone, value) VALUES ($1, $2, $3) \
             ON CONFLICT (task_id, milestone) DO NOTHING",
        )
        .bind(task as i64)
        .bind(i64::try_from(milestone).unwrap_or(i64::MAX))
        .bind(value)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("record a milestone"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("record a milestone"))?;
        Ok(())
    }

    /// Marks trials as stopped by early stopping at a milestone, before
    /// they are cancelled; the first mark stays.
    pub async fn mark_stopped(&self, trials: &[(TaskId, u64)]) -> Result<()> {
        let action = "mark trials stopped early";
        let mut tx = self.write_tx(action).await?;
        for (task, milestone) in trials {
            sqlx::query(
                "UPDATE sweep_trials SET stopped_at = $1 WHERE task_id = $2 AND stopped_at IS NULL",
            )
            .bind(i64::try_from(*milestone).unwrap_or(i64::MAX))
            .bind(*task as i64)
            .execute(&mut *tx)
            .await
            .map_err(StoreError::db(action))?;
        }
        tx.commit().await.map_err(StoreError::db(action))
    }
}
