//! The reads: the queue and the live tasks the scheduler rebuilds its
//! picture from, what a dispatch carries, the API's views of tasks and hosts.
//! Also the one write outside a batch, recording a host that said hello.

use super::values::{self, Param};
use super::{json, rows, Backend, Result, Store, StoreError};
use crate::model::{
    HostRecord, HostStanding, ProgressView, StoredCheckpoint, Task, TaskDetail, TaskStatus,
};
use std::collections::BTreeMap;
use trainyard_proto::adapter_version::VersionPin;
use trainyard_proto::resources::ResourceRequest;
use trainyard_proto::TaskId;

/// A PENDING task, as the queue needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct QueuedTask {
    pub id: TaskId,
    pub adapter: String,
    /// The versions of the adapter it may run on; `None`: any.
    pub version: Option<VersionPin>,
    pub kind: String,
    pub resources: ResourceRequest,
    pub priority: i32,
    /// The attempt the task was last dispatched at (0 if never).
    pub attempt: u32,
    pub runs: u32,
    pub max_attempts: u32,
}

/// A DISPATCHED or RUNNING task, as the scheduler tracks it.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveTask {
    pub id: TaskId,
    pub adapter: String,
    /// The versions of the adapter it may run on; `None`: any.
    pub version: Option<VersionPin>,
    pub kind: String,
    /// What it asked for, counted against its host while live.
    pub resources: ResourceRequest,
    pub priority: i32,
    pub status: TaskStatus,
    pub attempt: u32,
    pub host: String,
    pub slot: Option<u32>,
    pub dispatch_deadline_ms: Option<i64>,
    pub cancel_requested: bool,
    pub runs: u32,
    pub max_attempts: u32,
    /// The newest progress stored for its current attempt.
    pub progress: Option<ProgressView>,
}

/// What a Dispatch message carries besides the attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchPayload {
    pub id: TaskId,
    pub adapter: String,
    pub kind: String,
    /// The parameters as submitted (a JSON object, as text).
    pub params: String,
    /// The last checkpoint, handed to the next attempt.
    pub checkpoint: Option<StoredCheckpoint>,
    pub timeout_secs: Option<u64>,
    pub progress_timeout_secs: Option<u64>,
    pub resources: ResourceRequest,
}

/// Which tasks [`Store::tasks`] lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub adapter: Option<String>,
    /// Only tasks submitted with exactly this name.
    pub name: Option<String>,
    /// Only this team's tasks (a team principal's view).
    pub team: Option<String>,
    /// 0 means the default of 100; at most 1000.
    pub limit: u32,
    /// Page cursor: only tasks with a smaller id (the last id of the page
    /// before).
    pub before_id: Option<TaskId>,
}

const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

impl TaskFilter {
    fn effective_limit(&self) -> u32 {
        match self.limit {
            0 => DEFAULT_LIMIT,
            n => n.min(MAX_LIMIT),
        }
    }
}

/// `statuses` split into the final ones, looked up as `ended`, and the
/// live ones, under `ended IS NULL`: `tasks_by_end` is the only index that
/// knows a task's status, and `status` itself is indexed nowhere (see
/// migration 0011).
fn ended_and_live(statuses: &[TaskStatus]) -> (Vec<TaskStatus>, Vec<TaskStatus>) {
    statuses.iter().partition(|s| s.is_terminal())
}

/// The placeholders of `group`'s statuses, their values pushed onto
/// `params` (numbered after those already there).
fn placeholders(group: &[TaskStatus], params: &mut Vec<Param<'_>>) -> String {
    let mut listed = Vec::with_capacity(group.len());
    for status in group {
        params.push(Param::text(status.as_str()));
        listed.push(format!("${}", params.len()));
    }
    listed.join(", ")
}

/// The condition that a task is in `status`: a final one looked up as
/// `ended`, a live one under `ended IS NULL` ([`ended_and_live`]).
fn status_condition(status: TaskStatus, params: &mut Vec<Param<'_>>) -> String {
    let placeholder = placeholders(&[status], params);
    if status.is_terminal() {
        format!("ended = {placeholder}")
    } else {
        format!("ended IS NULL AND status = {placeholder}")
    }
}

/// The query counting the tasks in each of `statuses`, `(status, count)`
/// per status that has any: the final ones from `tasks_by_end` alone.
/// `None` when there is nothing to count.
fn count_query(statuses: &[TaskStatus]) -> Option<(String, Vec<Param<'static>>)> {
    let (ended, live) = ended_and_live(statuses);
    let mut params = Vec::new();
    let mut selects = Vec::new();
    if !ended.is_empty() {
        selects.push(format!(
            "SELECT ended AS status, COUNT(*) AS count FROM tasks WHERE ended IN ({}) GROUP BY ended",
            placeholders(&ended, &mut params)
        ));
    }
    if !live.is_empty() {
        selects.push(format!(
            "SELECT status, COUNT(*) AS count FROM tasks WHERE ended IS NULL AND status IN ({}) \
             GROUP BY status",
            placeholders(&live, &mut params)
        ));
    }
    (!selects.is_empty()).then(|| (selects.join(" UNION ALL "), params))
}

/// The listing query of a filter, with its parameters in placeholder order.
fn list_query(filter: &TaskFilter) -> (String, Vec<Param<'_>>) {
    let mut conditions = Vec::new();
    let mut params = Vec::new();
    if let Some(status) = filter.status {
        conditions.push(status_condition(status, &mut params));
    }
    if let Some(adapter) = &filter.adapter {
        params.push(Param::text(adapter));
        conditions.push(format!("adapter = ${}", params.len()));
    }
    if let Some(name) = &filter.name {
        params.push(Param::text(name));
        conditions.push(format!("name = ${}", params.len()));
    }
    if let Some(team) = &filter.team {
        params.push(Param::text(team));
        conditions.push(format!("team = ${}", params.len()));
    }
    if let Some(before) = filter.before_id {
        // Ids beyond i64 do not exist, so every stored id is before them.
        params.push(Param::Int(Some(i64::try_from(before).unwrap_or(i64::MAX))));
        conditions.push(format!("id < ${}", params.len()));
    }
    let filter_sql = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    params.push(Param::int(filter.effective_limit()));
    let sql = format!(
        "SELECT {} FROM tasks {filter_sql} ORDER BY id DESC LIMIT ${}",
        rows::TASK_COLUMNS,
        params.len()
    );
    (sql, params)
}

impl Store {
    /// PENDING tasks in dispatch order: priority DESC, then id (FIFO).
    pub async fn pending(&self) -> Result<Vec<QueuedTask>> {
        let sql = format!(
            "SELECT {} FROM tasks WHERE ended IS NULL AND status = 'PENDING' \
             ORDER BY priority DESC, id",
            rows::QUEUED_COLUMNS
        );
        let found = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("read the queue"))?;
        found.iter().map(rows::queued).collect()
    }

    /// The hosts each unfinished task failed on for the host's own reasons
    /// (its `HOST_FAULT` attempts), as (task, host) pairs.
    /// One entry per STALLED attempt of each unfinished task, so that its
    /// first stalls stay free across a master restart ([`crate::stall`]).
    pub async fn stalls(&self) -> Result<Vec<TaskId>> {
        use sqlx::Row;
        let found = sqlx::query(
            "SELECT a.task_id FROM tasks t JOIN attempts a ON a.task_id = t.id \
             WHERE t.ended IS NULL AND a.outcome = 'STALLED'",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db("read the stalls of unfinished tasks"))?;
        found
            .iter()
            .map(|row| {
                row.try_get::<i64, _>("task_id")
                    .map(|id| id as TaskId)
                    .map_err(StoreError::db("read a stall"))
            })
            .collect()
    }

    pub async fn host_faults(&self) -> Result<Vec<(TaskId, String)>> {
        use sqlx::Row;
        let found = sqlx::query(
            "SELECT DISTINCT a.task_id, a.host_id FROM tasks t \
             JOIN attempts a ON a.task_id = t.id \
             WHERE t.ended IS NULL AND a.outcome = 'HOST_FAULT' ORDER BY a.task_id, a.host_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::db(
            "read where tasks failed for their hosts' reasons",
        ))?;
        found
            .iter()
            .map(|row| {
                let task: i64 = row
                    .try_get("task_id")
                    .map_err(StoreError::db("read a host fault"))?;
                let host: String = row
                    .try_get("host_id")
                    .map_err(StoreError::db("read a host fault"))?;
                Ok((task as TaskId, host))
            })
            .collect()
    }

    /// DISPATCHED and RUNNING tasks, by id.
    pub async fn live(&self) -> Result<Vec<LiveTask>> {
        let sql = format!(
            "SELECT {} FROM tasks WHERE ended IS NULL AND status IN ('DISPATCHED', 'RUNNING') \
             ORDER BY id",
            rows::LIVE_COLUMNS
        );
        let found = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("read the live tasks"))?;
        found.iter().map(rows::live).collect()
    }

    /// A read-only transaction whose statements all see one snapshot:
    /// PostgreSQL's READ COMMITTED would give each statement its own, so a
    /// record and its rows (a task's attempts, a sweep's trials) could belong
    /// to different states. SQLite's transactions are snapshots already.
    pub(super) async fn snapshot(
        &self,
        action: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let mut tx = self.pool.begin().await.map_err(StoreError::db(action))?;
        if self.backend == Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(action))?;
        }
        Ok(tx)
    }

    /// One task with its attempts in ascending order, read from one snapshot.
    pub async fn task(&self, id: TaskId) -> Result<Option<TaskDetail>> {
        let Ok(id) = i64::try_from(id) else {
            return Ok(None);
        };
        let action = "read a task";
        let mut tx = self.snapshot(action).await?;
        let sql = format!("SELECT {} FROM tasks WHERE id = $1", rows::TASK_COLUMNS);
        let Some(row) = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::db(action))?
        else {
            return Ok(None);
        };
        let task = rows::task(&row)?;
        let sql = format!(
            "SELECT {} FROM attempts WHERE task_id = $1 ORDER BY attempt",
            rows::ATTEMPT_COLUMNS
        );
        let found = sqlx::query(&sql)
            .bind(id)
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::db(action))?;
        tx.commit().await.map_err(StoreError::db(action))?;
        let attempts = found
            .iter()
            .map(|row| rows::attempt(row, task.id))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(TaskDetail {
            task,
            attempts,
            waiting: None,
            quiet_for_ms: None,
        }))
    }

    /// Tasks matching the filter, newest first.
    pub async fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let (sql, params) = list_query(filter);
        let mut query = sqlx::query(&sql);
        for param in &params {
            query = values::bind(query, param);
        }
        let found = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("list tasks"))?;
        found.iter().map(rows::task).collect()
    }

    /// How many tasks are in each of `statuses`; each of them is present.
    /// The final statuses are counted from their entries of `tasks_by_end`
    /// alone: the scheduler counts them at start without reading a queue
    /// of any length.
    pub async fn status_counts(
        &self,
        statuses: &[TaskStatus],
    ) -> Result<BTreeMap<TaskStatus, u64>> {
        let mut counts: BTreeMap<TaskStatus, u64> = statuses.iter().map(|s| (*s, 0)).collect();
        let Some((sql, params)) = count_query(statuses) else {
            return Ok(counts);
        };
        let query = params
            .iter()
            .fold(sqlx::query(&sql), |q, p| values::bind(q, p));
        let found = query
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("count tasks"))?;
        for row in &found {
            let (status, count) = rows::status_count(row)?;
            counts.insert(status, count);
        }
        Ok(counts)
    }

    /// Records a host that said hello; a host seen before keeps its
    /// `first_seen_ms`.
    pub async fn upsert_host(&self, host: &HostRecord) -> Result<()> {
        let adapters = json::adapters(&host.adapters)?;
        let capacity = host.capacity.as_ref().map(json::capacity).transpose()?;
        let mut tx = self.write_tx("record a host").await?;
        sqlx::query(
            "INSERT INTO hosts (id, slots, adapters, agent, first_seen_ms, last_seen_ms, capacity) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (id) DO UPDATE SET slots = excluded.slots, adapters = excluded.adapters, \
             agent = excluded.agent, last_seen_ms = excluded.last_seen_ms, capacity = excluded.capacity",
        )
        .bind(host.id.replace('\0', "\u{FFFD}"))
        .bind(i64::from(host.slots))
        .bind(adapters)
        .bind(host.agent.replace('\0', "\u{FFFD}"))
        .bind(host.first_seen_ms)
        .bind(host.last_seen_ms)
        .bind(capacity)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("record a host"))?;
        tx.commit().await.map_err(StoreError::db("record a host"))?;
        Ok(())
    }

    /// Records whether `host` takes new work; false if no such host was
    /// ever seen.
    pub async fn set_standing(&self, host: &str, standing: &HostStanding) -> Result<bool> {
        let q = standing.quarantine.as_ref();
        let mut tx = self.write_tx("record a host's standing").await?;
        let done = sqlx::query(
            "UPDATE hosts SET drained_at_ms = $2, quarantined_at_ms = $3, quarantine_reason = $4, \
             last_error = $5, failed_probes = $6, next_probe_at_ms = $7 WHERE id = $1",
        )
        .bind(host.replace('\0', "\u{FFFD}"))
        .bind(standing.drained_at_ms)
        .bind(q.map(|q| q.since_ms))
        .bind(q.map(|q| q.reason.replace('\0', "\u{FFFD}")))
        .bind(
            q.and_then(|q| q.last_error.as_ref())
                .map(|e| e.replace('\0', "\u{FFFD}")),
        )
        .bind(i64::from(q.map_or(0, |q| q.failed_probes)))
        .bind(q.map(|q| q.next_probe_at_ms))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::db("record a host's standing"))?;
        tx.commit()
            .await
            .map_err(StoreError::db("record a host's standing"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Every host ever seen, by id.
    pub async fn hosts(&self) -> Result<Vec<HostRecord>> {
        let sql = format!("SELECT {} FROM hosts ORDER BY id", rows::HOST_COLUMNS);
        let found = sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .map_err(StoreError::db("read hosts"))?;
        found.iter().map(rows::host).collect()
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn listing_limits_default_and_cap() {
        let limit = |n| {
            TaskFilter {
                limit: n,
                ..TaskFilter::default()
            }
            .effective_limit()
        };
        assert_eq!(limit(0), 100);
        assert_eq!(limit(7), 7);
        assert_eq!(limit(5000), 1000);
    }

    #[test]
    fn listing_binds_only_the_filters_given() {
        let filter = TaskFilter {
            adapter: Some("ppo".into()),
            before_id: Some(10),
            ..TaskFilter::default()
        };
        let (sql, params) = list_query(&filter);
        assert!(
            sql.contains("WHERE adapter = $1 AND id < $2 ORDER BY id DESC LIMIT $3"),
            "{sql}"
        );
        assert_eq!(params.len(), 3);
    }

    #[test]
    fn statuses_are_found_by_end_and_never_by_status_alone() {
        let filter = |status| TaskFilter {
            status: Some(status),
            ..TaskFilter::default()
        };
        let (sql, _) = list_query(&filter(TaskStatus::Failed));
        assert!(sql.contains("WHERE ended = $1 ORDER BY"), "{sql}");
        let (sql, _) = list_query(&filter(TaskStatus::Running));
        assert!(
            sql.contains("WHERE ended IS NULL AND status = $1 ORDER BY"),
            "{sql}"
        );
        let (sql, params) = count_query(&TaskStatus::TERMINAL).unwrap();
        assert!(!sql.contains("status IN"), "{sql}");
        assert_eq!(params.len(), 3);
        let (sql, params) = count_query(&TaskStatus::ALL).unwrap();
        assert_eq!(sql.matches("UNION ALL").count(), 1, "{sql}");
        assert_eq!(params.len(), 6);
        assert!(count_query(&[]).is_none());
    }
}
