//! Turning rows into the model's types. Each decoder comes with the column
//! list it reads, so the two stay together. A value this version cannot read
//! (an unknown status, invalid JSON, a negative count) is a
//! [`StoreError::Corrupt`] naming the row and column, never a panic.

use super::json;
use super::read::{DispatchPayload, LiveTask, QueuedTask};
use super::{Result, StoreError};
use crate::model::{
    Attempt, AttemptOutcome, CheckpointView, HostRecord, HostStanding, Quarantine,
    StoredCheckpoint, Task, TaskStatus,
};
use crate::search::spec::Direction;
use crate::search::{SweepRecord, TrialRow};
use sqlx::any::AnyRow;
use sqlx::Row;
use trainyard_proto::adapter_version::VersionPin;
use trainyard_proto::messages::{Checkpoint, StoredObject};
use trainyard_proto::TaskId;

/// The columns [`task`] reads. The checkpoint's size is computed by the
/// database so listing tasks does not load checkpoint bytes.
pub(super) const TASK_COLUMNS: &str = "id, team, name, adapter, adapter_version, kind, params, priority, status, attempt, runs, \
     max_attempts, timeout_secs, progress_timeout_secs, resources, host_id, slot, cancel_requested, dispatch_deadline_ms, progress, \
     checkpoint_attempt, checkpoint_kind, checkpoint_name, LENGTH(checkpoint_data) AS checkpoint_bytes, \
     checkpoint_object, result, error, created_at_ms, updated_at_ms, started_at_ms, finished_at_ms";

pub(super) const ATTEMPT_COLUMNS: &str =
    "attempt, host_id, adapter_version, slot, dispatched_at_ms, started_at_ms, finished_at_ms, outcome, error, metrics, assignment";

pub(super) const QUEUED_COLUMNS: &str =
    "id, adapter, adapter_version, kind, resources, priority, attempt, runs, max_attempts";

pub(super) const LIVE_COLUMNS: &str =
    "id, adapter, adapter_version, kind, resources, priority, status, attempt, host_id, slot, dispatch_deadline_ms, cancel_requested, runs, max_attempts, progress";

pub(super) const PAYLOAD_COLUMNS: &str =
    "id, adapter, kind, params, timeout_secs, progress_timeout_secs, resources, checkpoint_attempt, checkpoint_kind, checkpoint_name, checkpoint_data, checkpoint_object";

pub(super) const HOST_COLUMNS: &str =
    "id, slots, adapters, agent, first_seen_ms, last_seen_ms, capacity, drained_at_ms, \
     quarantined_at_ms, quarantine_reason, last_error, failed_probes, next_probe_at_ms";

/// The cells of one row, with the row's name for error messages.
struct Cells<'r> {
    row: &'r AnyRow,
    name: String,
}

impl<'r> Cells<'r> {
    /// A `tasks` row, named by its id.
    fn task(row: &'r AnyRow) -> Result<(Self, TaskId)> {
        let unnamed = Cells {
            row,
            name: "a task row".into(),
        };
        let id = unnamed.task_id("id")?;
        Ok((
            Cells {
                row,
                name: format!("task {id}"),
            },
            id,
        ))
    }

    fn named(row: &'r AnyRow, name: String) -> Self {
        Cells { row, name }
    }

    fn corrupt(&self, column: &'static str, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            row: self.name.clone(),
            column,
            reason: reason.to_string(),
        }
    }

    fn get<T>(&self, column: &'static str) -> Result<T>
    where
        T: for<'a> sqlx::Decode<'a, sqlx::Any> + sqlx::Type<sqlx::Any>,
    {
        self.row
            .try_get(column)
            .map_err(|e| self.corrupt(column, e))
    }

    fn opt_i64(&self, column: &'static str) -> Result<Option<i64>> {
        self.get(column)
    }

    fn i64(&self, column: &'static str) -> Result<i64> {
        self.get(column)
    }

    fn opt_u32(&self, column: &'static str) -> Result<Option<u32>> {
        self.opt_i64(column)?
            .map(|v| {
                u32::try_from(v).map_err(|_| self.corrupt(column, format!("{v} is not a count")))
            })
            .transpose()
    }

    fn u32(&self, column: &'static str) -> Result<u32> {
        let v = self.i64(column)?;
        u32::try_from(v).map_err(|_| self.corrupt(column, format!("{v} is not a count")))
    }

    fn opt_u64(&self, column: &'static str) -> Result<Option<u64>> {
        self.opt_i64(column)?
            .map(|v| u64::try_from(v).map_err(|_| self.corrupt(column, format!("{v} is negative"))))
            .transpose()
    }

    fn task_id(&self, column: &'static str) -> Result<TaskId> {
        let v = self.i64(column)?;
        TaskId::try_from(v).map_err(|_| self.corrupt(column, format!("{v} is not a task id")))
    }

    fn i32(&self, column: &'static str) -> Result<i32> {
        let v = self.i64(column)?;
        i32::try_from(v).map_err(|_| self.corrupt(column, format!("{v} is out of range")))
    }

    fn flag(&self, column: &'static str) -> Result<bool> {
        match self.i64(column)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.corrupt(column, format!("{v} is neither 0 nor 1"))),
        }
    }

    fn text(&self, column: &'static str) -> Result<String> {
        self.get(column)
    }

    fn opt_text(&self, column: &'static str) -> Result<Option<String>> {
        self.get(column)
    }

    /// The task's version requirement, if it was submitted with one.
    fn pin(&self) -> Result<Option<VersionPin>> {
        self.opt_text("adapter_version")?
            .map(|text| VersionPin::parse(&text).map_err(|e| self.corrupt("adapter_version", e)))
            .transpose()
    }

    fn status(&self, column: &'static str) -> Result<TaskStatus> {
        let s = self.text(column)?;
        TaskStatus::parse(&s).ok_or_else(|| self.corrupt(column, format!("unknown status {s:?}")))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, column: &'static str) -> Result<Option<T>> {
        self.opt_text(column)?
            .map(|text| json::decode(|| self.name.clone(), column, &text))
            .transpose()
    }

    /// The stored checkpoint's kind, name and attempt, if there is one.
    fn checkpoint_kind(&self) -> Result<Option<(String, String, u32)>> {
        let Some(kind) = self.opt_text("checkpoint_kind")? else {
            return Ok(None);
        };
        if kind != "file" && kind != "external" {
            return Err(self.corrupt("checkpoint_kind", format!("unknown kind {kind:?}")));
        }
        let name = self.opt_text("checkpoint_name")?.unwrap_or_default();
        let attempt = self.opt_u32("checkpoint_attempt")?.unwrap_or(0);
        Ok(Some((kind, name, attempt)))
    }
}

pub(super) fn task(row: &AnyRow) -> Result<Task> {
    let (c, id) = Cells::task(row)?;
    let checkpoint = match c.checkpoint_kind()? {
        Some((kind, name, attempt)) => {
            let object: Option<StoredObject> = c.json("checkpoint_object")?;
            Some(CheckpointView {
                bytes: match &object {
                    Some(o) => o.size,
                    None => c.opt_u64("checkpoint_bytes")?.unwrap_or(0),
                },
                sha256: object.map(|o| o.sha256),
                kind,
                name,
                attempt,
            })
        }
        None => None,
    };
    let params_text = c.text("params")?;
    Ok(Task {
        id,
        team: c.text("team")?,
        name: c.opt_text("name")?,
        adapter: c.text("adapter")?,
        adapter_version: c.pin()?,
        kind: c.text("kind")?,
        params: json::decode(|| c.name.clone(), "params", &params_text)?,
        priority: c.i32("priority")?,
        status: c.status("status")?,
        attempt: c.u32("attempt")?,
        runs: c.u32("runs")?,
        max_attempts: c.u32("max_attempts")?,
        timeout_secs: c.opt_u64("timeout_secs")?,
        progress_timeout_secs: c.opt_u64("progress_timeout_secs")?,
        resources: c.json("resources")?.unwrap_or_default(),
        host: c.opt_text("host_id")?,
        slot: c.opt_u32("slot")?,
        cancel_requested: c.flag("cancel_requested")?,
        dispatch_deadline_ms: c.opt_i64("dispatch_deadline_ms")?,
        progress: c.json("progress")?,
        checkpoint,
        result: c.json("result")?,
        error: c.opt_text("error")?,
        created_at_ms: c.i64("created_at_ms")?,
        updated_at_ms: c.i64("updated_at_ms")?,
        started_at_ms: c.opt_i64("started_at_ms")?,
        finished_at_ms: c.opt_i64("finished_at_ms")?,
    })
}

pub(super) fn attempt(row: &AnyRow, task: TaskId) -> Result<Attempt> {
    let attempt_no = row.try_get::<i64, _>("attempt").unwrap_or(-1);
    let c = Cells::named(row, format!("attempt {attempt_no} of task {task}"));
    let outcome = match c.opt_text("outcome")? {
        Some(s) => Some(
            AttemptOutcome::parse(&s)
                .ok_or_else(|| c.corrupt("outcome", format!("unknown outcome {s:?}")))?,
        ),
        None => None,
    };
    Ok(Attempt {
        attempt: c.u32("attempt")?,
        host: c.text("host_id")?,
        adapter_version: c.opt_text("adapter_version")?,
        slot: c.opt_u32("slot")?,
        dispatched_at_ms: c.i64("dispatched_at_ms")?,
        started_at_ms: c.opt_i64("started_at_ms")?,
        finished_at_ms: c.opt_i64("finished_at_ms")?,
        outcome,
        error: c.opt_text("error")?,
        metrics: c.json("metrics")?,
        assignment: c.json("assignment")?,
    })
}

pub(super) fn queued(row: &AnyRow) -> Result<QueuedTask> {
    let (c, id) = Cells::task(row)?;
    Ok(QueuedTask {
        id,
        adapter: c.text("adapter")?,
        version: c.pin()?,
        kind: c.text("kind")?,
        resources: c.json("resources")?.unwrap_or_default(),
        priority: c.i32("priority")?,
        attempt: c.u32("attempt")?,
        runs: c.u32("runs")?,
        max_attempts: c.u32("max_attempts")?,
    })
}

pub(super) fn live(row: &AnyRow) -> Result<LiveTask> {
    let (c, id) = Cells::task(row)?;
    Ok(LiveTask {
        id,
        adapter: c.text("adapter")?,
        version: c.pin()?,
        kind: c.text("kind")?,
        resources: c.json("resources")?.unwrap_or_default(),
        priority: c.i32("priority")?,
        status: c.status("status")?,
        attempt: c.u32("attempt")?,
        // A live task always has a host: dispatch sets it, requeue clears it
        // only while moving the task back to PENDING.
        host: c
            .opt_text("host_id")?
            .ok_or_else(|| c.corrupt("host_id", "a live task without a host"))?,
        slot: c.opt_u32("slot")?,
        dispatch_deadline_ms: c.opt_i64("dispatch_deadline_ms")?,
        cancel_requested: c.flag("cancel_requested")?,
        runs: c.u32("runs")?,
        max_attempts: c.u32("max_attempts")?,
        progress: c.json("progress")?,
    })
}

pub(super) fn dispatch_payload(row: &AnyRow) -> Result<DispatchPayload> {
    let (c, id) = Cells::task(row)?;
    let checkpoint = match c.checkpoint_kind()? {
        Some((kind, name, attempt)) => Some(StoredCheckpoint {
            attempt,
            checkpoint: if let Some(object) = c.json::<StoredObject>("checkpoint_object")? {
                Checkpoint::Stored {
                    name,
                    object: Box::new(object),
                }
            } else if kind == "file" {
                Checkpoint::File {
                    name,
                    data: c
                        .get::<Option<Vec<u8>>>("checkpoint_data")?
                        .unwrap_or_default(),
                }
            } else {
                Checkpoint::External(name)
            },
        }),
        None => None,
    };
    Ok(DispatchPayload {
        id,
        adapter: c.text("adapter")?,
        kind: c.text("kind")?,
        params: c.text("params")?,
        checkpoint,
        timeout_secs: c.opt_u64("timeout_secs")?,
        progress_timeout_secs: c.opt_u64("progress_timeout_secs")?,
        resources: c.json("resources")?.unwrap_or_default(),
    })
}

pub(super) fn host(row: &AnyRow) -> Result<HostRecord> {
    let id: String = row.try_get("id").unwrap_or_else(|_| "?".into());
    let c = Cells::named(row, format!("host {id}"));
    Ok(HostRecord {
        slots: c.u32("slots")?,
        capacity: c.json("capacity")?,
        adapters: c.json("adapters")?.unwrap_or_default(),
        agent: c.text("agent")?,
        first_seen_ms: c.i64("first_seen_ms")?,
        last_seen_ms: c.i64("last_seen_ms")?,
        standing: HostStanding {
            drained_at_ms: c.opt_i64("drained_at_ms")?,
            quarantine: match c.opt_i64("quarantined_at_ms")? {
                None => None,
                Some(since_ms) => Some(Quarantine {
                    since_ms,
                    reason: c.opt_text("quarantine_reason")?.unwrap_or_default(),
                    last_error: c.opt_text("last_error")?,
                    failed_probes: c.u32("failed_probes")?,
                    next_probe_at_ms: c.opt_i64("next_probe_at_ms")?.unwrap_or(since_ms),
                }),
            },
        },
        id,
    })
}

/// A row of `SELECT status, COUNT(*) AS count .. GROUP BY status`.
pub(super) fn status_count(row: &AnyRow) -> Result<(TaskStatus, u64)> {
    let c = Cells::named(row, "the status counts".into());
    let count = c.i64("count")?;
    Ok((c.status("status")?, u64::try_from(count).unwrap_or(0)))
}

/// The columns [`sweep`] reads.
pub(super) const SWEEP_COLUMNS: &str =
    "id, team, name, adapter, kind, metric, direction, created_at_ms, cancelled_at_ms";

/// The columns [`trial`] reads, from `sweep_trials` joined with `tasks`.
pub(super) const TRIAL_COLUMNS: &str =
    "st.task_id, st.config, st.seed, st.stopped_at, t.status, t.result, t.progress";

pub(super) fn sweep(row: &AnyRow) -> Result<SweepRecord> {
    let c = Cells::named(row, "a sweep row".into());
    let id = c.opt_u64("id")?.unwrap_or_default();
    let c = Cells::named(row, format!("sweep {id}"));
    let direction = c.text("direction")?;
    Ok(SweepRecord {
        id,
        team: c.text("team")?,
        name: c.opt_text("name")?,
        adapter: c.text("adapter")?,
        kind: c.text("kind")?,
        metric: c.text("metric")?,
        direction: Direction::parse(&direction)
            .ok_or_else(|| c.corrupt("direction", format!("unknown direction {direction:?}")))?,
        created_at_ms: c.i64("created_at_ms")?,
        cancelled_at_ms: c.opt_i64("cancelled_at_ms")?,
    })
}

pub(super) fn trial(row: &AnyRow) -> Result<TrialRow> {
    let c = Cells::named(row, "a sweep trial row".into());
    let task = c.task_id("task_id")?;
    let c = Cells::named(row, format!("the trial of task {task}"));
    Ok(TrialRow {
        task,
        config: c.u32("config")? as usize,
        seed: c.i64("seed")?,
        stopped_at: c.opt_u64("stopped_at")?,
        status: c.status("status")?,
        result: c.json("result")?,
        progress: c.json("progress")?,
    })
}
