//! The batch transaction: new tasks first, then the writes, grouped by
//! [`batch::plan`] into multi-row compare-and-set statements, then the
//! turn's progress points.
//!
//! Each task statement updates only the rows still in the state the write
//! expects (status and attempt) and returns their ids: those writes applied,
//! the others changed nothing. The attempt rows of the applied writes follow
//! in a second statement of the same transaction, so a task and its attempt
//! row never disagree after a commit.
//!
//! Running the statements ([`execute`]) and committing ([`Executed::commit`])
//! are separate steps, so that the scheduler can run a turn's statements on
//! PostgreSQL while the turn before it commits.

use super::batch::{self, Action, Batch, BatchResult, Next, Write};
use super::statements::*;
use super::values::{self, Col, Param};
use super::{json, Backend, DispatchPayload, Result, Store, StoreError};
use crate::model::{NewTask, StoredCheckpoint, TaskStatus};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};
use std::borrow::Cow;
use std::collections::HashSet;
use trainyard_proto::adapter_version::VersionPin;
use trainyard_proto::messages::Checkpoint;
use trainyard_proto::resources::Assignment;
use trainyard_proto::TaskId;

/// A batch whose statements have run, in a transaction still open: its
/// rows stay locked until [`Executed::commit`], and dropping it rolls the
/// batch back.
pub struct Executed {
    /// `None` for an empty batch, which needs no transaction.
    tx: Option<sqlx::Transaction<'static, sqlx::Any>>,
    result: BatchResult,
}

impl Executed {
    /// Commits the batch; returns what it did.
    pub async fn commit(self) -> Result<BatchResult> {
        if let Some(tx) = self.tx {
            tx.commit()
                .await
                .map_err(StoreError::db("commit a batch"))?;
        }
        Ok(self.result)
    }

    /// Rolls the batch back now rather than when the connection is next
    /// used, so that its rows are unlocked before this returns.
    pub async fn rollback(self) -> Result<()> {
        match self.tx {
            Some(tx) => tx
                .rollback()
                .await
                .map_err(StoreError::db("roll a batch back")),
            None => Ok(()),
        }
    }
}

pub(super) async fn execute(store: &Store, batch: &Batch) -> Result<Executed> {
    if batch.inserts.is_empty() && batch.writes.is_empty() && batch.points.is_empty() {
        return Ok(Executed {
            tx: None,
            result: BatchResult::default(),
        });
    }
    let backend = store.backend;
    let plan = batch::plan(&batch.writes);
    let mut tx = begin(store, !plan.groups.is_empty()).await?;
    let mut writer = Writer {
        conn: &mut tx,
        backend,
        now: batch.now_ms,
        payloads: vec![],
    };
    let inserted = writer.insert_tasks(&batch.inserts).await?;
    let sweeps = super::sweeps::insert(
        &mut *writer.conn,
        backend,
        batch.now_ms,
        &batch.sweeps,
        &inserted,
    )
    .await?;
    let mut applied = vec![false; batch.writes.len()];
    for group in &plan.groups {
        let writes: Vec<Planned> = group
            .writes
            .iter()
            .filter_map(|&i| {
                let write = &batch.writes[i];
                let start = plan.started_by.get(&i).map(|&s| &batch.writes[s]);
                // An id beyond i64 names no stored task: it cannot apply.
                i64::try_from(write.task())
                    .ok()
                    .map(|id| (write, id, start))
            })
            .collect();
        let done = writer.run_group(group.action, &writes).await?;
        for &i in &group.writes {
            applied[i] = i64::try_from(batch.writes[i].task()).is_ok_and(|id| done.contains(&id));
            if let Some(&start) = plan.started_by.get(&i) {
                applied[start] = applied[i];
            }
        }
    }
    super::points::insert(&mut *writer.conn, backend, &batch.points).await?;
    let payloads = std::mem::take(&mut writer.payloads);
    Ok(Executed {
        tx: Some(tx),
        result: BatchResult {
            inserted,
            sweeps,
            applied,
            payloads,
        },
    })
}

/// Begins a batch's transaction; on PostgreSQL, one with `writes` looks
/// its rows up by key ([`LOOKUP_BY_KEY`]).
pub(super) async fn begin(
    store: &Store,
    writes: bool,
) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
    let mut tx = store.write_tx("begin a batch").await?;
    if writes && store.backend == Backend::Postgres {
        sqlx::Executor::execute(&mut *tx, LOOKUP_BY_KEY)
            .await
            .map_err(StoreError::db("plan a batch's writes"))?;
    }
    Ok(tx)
}

/// A write of a group, its task's id, and the start a finish carries out
/// too ([`batch::Plan::started_by`]).
type Planned<'w> = (&'w Write, i64, Option<&'w Write>);

/// The open batch transaction.
struct Writer<'c> {
    conn: &'c mut AnyConnection,
    backend: Backend,
    /// The batch clock, bound as `{now}`.
    now: i64,
    /// What the applied dispatches' messages need, as their statement
    /// returned it.
    payloads: Vec<DispatchPayload>,
}

impl Writer<'_> {
    /// Runs a template over rows; returns what the statements returned.
    async fn run(
        &mut self,
        action: &'static str,
        template: &str,
        cols: &[Col],
        rows: &[Vec<Param<'_>>],
    ) -> Result<Vec<AnyRow>> {
        values::run(
            self.conn,
            self.backend,
            template,
            cols,
            rows,
            Some(self.now),
        )
        .await
        .map_err(StoreError::db(action))
    }

    /// Inserts the new tasks and returns their ids in the order given. Ids
    /// grow in insertion order within the transaction, so sorting what
    /// `RETURNING` gives (whose order neither database promises) restores
    /// the input order.
    async fn insert_tasks(&mut self, tasks: &[NewTask]) -> Result<Vec<TaskId>> {
        let action = "record new tasks";
        let rows: Vec<Vec<Param>> = tasks
            .iter()
            .map(|t| {
                Ok(vec![
                    Param::opt_text(t.name.as_deref()),
                    Param::text(&t.adapter),
                    Param::text(&t.kind),
                    Param::text(&t.params),
                    Param::int(t.priority),
                    Param::int(t.max_attempts),
                    // A timeout beyond i64 seconds is no limit at all.
                    Param::Int(t.timeout_secs.map(|s| i64::try_from(s).unwrap_or(i64::MAX))),
                    Param::Text(json::resources(&t.resources)?.map(Cow::Owned)),
                    Param::opt_text(t.version.as_ref().map(VersionPin::as_str)),
                    Param::Int(
                        t.progress_timeout_secs
                            .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                    ),
                    Param::text(&t.team),
                ])
            })
            .collect::<Result<_>>()?;
        let returned = self.run(action, INSERT_TASKS, INSERT_COLS, &rows).await?;
        let mut ids = returned
            .iter()
            .map(|row| row.try_get::<i64, _>(0).map(|id| id as TaskId))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StoreError::db(action))?;
        ids.sort_unstable();
        if ids.len() != tasks.len() {
            return Err(StoreError::Database {
                action,
                source: sqlx::Error::Protocol(format!(
                    "{} tasks inserted, {} ids returned",
                    tasks.len(),
                    ids.len()
                )),
            });
        }
        Ok(ids)
    }

    /// Runs one group's statements; returns the ids of the tasks it changed.
    async fn run_group(&mut self, action: Action, writes: &[Planned<'_>]) -> Result<HashSet<i64>> {
        match action {
            Action::Dispatch => self.dispatch(writes).await,
            Action::Start => self.start(writes).await,
            Action::Progress => self.progress(writes).await,
            Action::Finish => self.finish(writes).await,
            Action::Assign => self.assign(writes).await,
            Action::RequestCancel => {
                let rows = writes
                    .iter()
                    .filter_map(|(w, id, _)| match w {
                        Write::RequestCancel { attempt } => {
                            let mut row = vec![Param::int(*id), Param::int(attempt.attempt)];
                            row.extend(live());
                            Some(row)
                        }
                        _ => None,
                    })
                    .collect::<Vec<_>>();
                self.changed(
                    "record cancel requests",
                    &request_cancel(),
                    REQUEST_CANCEL_COLS,
                    &rows,
                )
                .await
            }
            Action::CancelPending => {
                let rows = writes
                    .iter()
                    .map(|(_, id, _)| vec![Param::int(*id), expect(TaskStatus::Pending)])
                    .collect::<Vec<_>>();
                self.changed(
                    "cancel pending tasks",
                    CANCEL_PENDING,
                    CANCEL_PENDING_COLS,
                    &rows,
                )
                .await
            }
        }
    }

    /// Runs a task statement and collects the ids it returned.
    async fn changed(
        &mut self,
        action: &'static str,
        template: &str,
        cols: &[Col],
        rows: &[Vec<Param<'_>>],
    ) -> Result<HashSet<i64>> {
        let returned = self.run(action, template, cols, rows).await?;
        returned
            .iter()
            .map(|row| row.try_get::<i64, _>(0))
            .collect::<Result<_, _>>()
            .map_err(StoreError::db(action))
    }

    /// Runs an attempts statement over the rows of the writes that applied.
    async fn follow_up(
        &mut self,
        action: &'static str,
        template: &str,
        cols: &[Col],
        rows: Vec<(i64, Vec<Param<'_>>)>,
        done: &HashSet<i64>,
    ) -> Result<()> {
        let rows: Vec<Vec<Param>> = rows
            .into_iter()
            .filter(|(id, _)| done.contains(id))
            .map(|(_, row)| row)
            .collect();
        self.run(action, template, cols, &rows).await?;
        Ok(())
    }

    async fn dispatch(&mut self, writes: &[Planned<'_>]) -> Result<HashSet<i64>> {
        let mut tasks = Vec::with_capacity(writes.len());
        let mut attempts = Vec::with_capacity(writes.len());
        for (write, id, _) in writes {
            if let Write::Dispatch {
                from_attempt,
                attempt,
                host,
                deadline_ms,
                version,
                ..
            } = write
            {
                tasks.push(vec![
                    Param::int(*id),
                    Param::int(*from_attempt),
                    Param::int(*attempt),
                    Param::text(host),
                    Param::int(*deadline_ms),
                    expect(TaskStatus::Pending),
                ]);
                attempts.push((
                    *id,
                    vec![
                        Param::int(*id),
                        Param::int(*attempt),
                        Param::text(host),
                        Param::opt_text(version.as_deref()),
                    ],
                ));
            }
        }
        let action = "record dispatches";
        let returned = self
            .run(action, &dispatch_tasks(), DISPATCH_COLS, &tasks)
            .await?;
        let payloads = returned
            .iter()
            .map(super::rows::dispatch_payload)
            .collect::<Result<Vec<_>>>()?;
        let done = payloads.iter().map(|p| p.id as i64).collect();
        self.payloads.extend(payloads);
        self.follow_up(
            action,
            DISPATCH_ATTEMPTS,
            DISPATCH_ATTEMPT_COLS,
            attempts,
            &done,
        )
        .await?;
        Ok(done)
    }

    async fn assign(&mut self, writes: &[Planned<'_>]) -> Result<HashSet<i64>> {
        let mut rows = Vec::with_capacity(writes.len());
        for (write, id, _) in writes {
            if let Write::Assign {
                attempt,
                assignment,
            } = write
            {
                rows.push(vec![
                    Param::int(*id),
                    Param::int(attempt.attempt),
                    Param::owned_text(json::assignment(assignment)?),
                ]);
            }
        }
        self.changed("record assignments", ASSIGN_ATTEMPTS, ASSIGN_COLS, &rows)
            .await
    }

    async fn start(&mut self, writes: &[Planned<'_>]) -> Result<HashSet<i64>> {
        let mut tasks = Vec::with_capacity(writes.len());
        let mut attempts = Vec::with_capacity(writes.len());
        for (write, id, _) in writes {
            if let Write::Start {
                attempt,
                slot,
                assignment,
            } = write
            {
                let key = [
                    Param::int(*id),
                    Param::int(attempt.attempt),
                    Param::int(*slot),
                ];
                let assignment = assignment_param(assignment.as_ref())?;
                let mut row = key.to_vec();
                row.push(expect(TaskStatus::Dispatched));
                tasks.push(row);
                let mut attempt_row = key.to_vec();
                attempt_row.push(assignment);
                attempts.push((*id, attempt_row));
            }
        }
        let action = "record starts";
        let done = self
            .changed(action, START_TASKS, START_COLS, &tasks)
            .await?;
        self.follow_up(action, START_ATTEMPTS, START_ATTEMPT_COLS, attempts, &done)
            .await?;
        Ok(done)
    }

    async fn progress(&mut self, writes: &[Planned<'_>]) -> Result<HashSet<i64>> {
        let mut rows = Vec::with_capacity(writes.len());
        for (write, id, _) in writes {
            if let Write::Progress {
                attempt,
                progress,
                checkpoint,
            } = write
            {
                let mut row = vec![
                    Param::int(*id),
                    Param::int(attempt.attempt),
                    Param::owned_text(json::progress(progress)?),
                ];
                row.extend(checkpoint_params(checkpoint.as_ref())?);
                row.extend(live());
                rows.push(row);
            }
        }
        self.changed(
            "record progress",
            &progress_tasks(),
            &progress_cols(),
            &rows,
        )
        .await
    }

    async fn finish(&mut self, writes: &[Planned<'_>]) -> Result<HashSet<i64>> {
        let mut tasks = Vec::with_capacity(writes.len());
        let mut attempts = Vec::with_capacity(writes.len());
        for &(write, id, start) in writes {
            if let Some((task, attempt)) = finish_rows(write, id, start)? {
                tasks.push(task);
                attempts.push((id, attempt));
            }
        }
        let action = "record finished attempts";
        let done = self
            .changed(action, &finish_tasks(), &finish_cols(), &tasks)
            .await?;
        self.follow_up(
            action,
            FINISH_ATTEMPTS,
            FINISH_ATTEMPT_COLS,
            attempts,
            &done,
        )
        .await?;
        Ok(done)
    }
}

/// A finish's rows for [`finish_tasks`] and [`FINISH_ATTEMPTS`], with the
/// start it carries out too, if any; `None` for any other write.
fn finish_rows<'w>(
    write: &'w Write,
    id: i64,
    start: Option<&'w Write>,
) -> Result<Option<(Vec<Param<'w>>, Vec<Param<'w>>)>> {
    let Write::Finish {
        attempt,
        outcome,
        error,
        metrics,
        next,
        counted,
    } = write
    else {
        return Ok(None);
    };
    let (status, result, task_error, checkpoint) = match next {
        Next::Completed { result, checkpoint } => (
            TaskStatus::Completed,
            Some(json::result(result)?),
            None,
            checkpoint.as_ref(),
        ),
        Next::Failed { error } => (TaskStatus::Failed, None, Some(error.as_str()), None),
        Next::Cancelled => (TaskStatus::Cancelled, None, None, None),
        Next::Requeue => (TaskStatus::Pending, None, None, None),
    };
    let (started, slot, assignment) = match start {
        Some(Write::Start {
            slot, assignment, ..
        }) => (1, Param::int(*slot), assignment_param(assignment.as_ref())?),
        _ => (0, Param::Int(None), Param::Text(None)),
    };
    let mut task = vec![
        Param::int(id),
        Param::int(attempt.attempt),
        Param::text(status.as_str()),
        Param::Text(result.map(Cow::Owned)),
        Param::opt_text(task_error),
    ];
    task.extend(checkpoint_params(checkpoint)?);
    let counted = i64::from(*counted);
    task.extend([Param::int(started), slot.clone(), Param::int(counted)]);
    task.extend(live());
    let metrics = metrics.as_ref().map(json::metrics).transpose()?;
    let attempt = vec![
        Param::int(id),
        Param::int(attempt.attempt),
        Param::text(outcome.as_str()),
        Param::opt_text(error.as_deref()),
        Param::Text(metrics.map(Cow::Owned)),
        Param::int(started),
        slot,
        assignment,
    ];
    Ok(Some((task, attempt)))
}

/// An assignment as its column holds it: JSON, or NULL when unknown.
fn assignment_param(assignment: Option<&Assignment>) -> Result<Param<'static>> {
    let json = assignment.map(json::assignment).transpose()?;
    Ok(Param::Text(json.map(Cow::Owned)))
}

/// The six checkpoint columns of a row: whether it brings one, then the
/// checkpoint's attempt, kind, name, bytes (kept inline) and object (in
/// the artifact store, as JSON).
fn checkpoint_params(checkpoint: Option<&StoredCheckpoint>) -> Result<[Param<'_>; 6]> {
    let Some(c) = checkpoint else {
        return Ok([
            Param::int(0),
            Param::Int(None),
            Param::Text(None),
            Param::Text(None),
            Param::Blob(None),
            Param::Text(None),
        ]);
    };
    let (kind, name, data, object) = match &c.checkpoint {
        Checkpoint::File { name, data } => {
            ("file", name, Some(Cow::Borrowed(data.as_slice())), None)
        }
        Checkpoint::External(reference) => ("external", reference, None, None),
        Checkpoint::Stored { name, object } => (
            "file",
            name,
            None,
            Some(Cow::Owned(json::stored_object(object)?)),
        ),
    };
    Ok([
        Param::int(1),
        Param::int(c.attempt),
        Param::text(kind),
        Param::text(name),
        Param::Blob(data),
        Param::Text(object),
    ])
}
