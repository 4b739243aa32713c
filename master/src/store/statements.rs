//! The statements of a batch, as templates for [`values::run`]: `{values}`
//! takes the rows of a `WITH v(..) AS (VALUES ..)` list, `{now}` the batch
//! clock. The column lists (`*_COLS`) type the rows, in `v`'s column order.
//!
//! Each task statement is a compare-and-set: its `WHERE` names the status
//! and attempt the write expects, and `RETURNING id` says which rows
//! matched. The CTE columns are all prefixed `v_`, so that `id`, `status`
//! and `attempt` always mean the table's columns.
//!
//! The expected status comes with each row (`v_expect`, and `v_expect_or`
//! where either of two will do), like the expected attempt, rather than as
//! a constant of the statement. Given `status = 'DISPATCHED'`, PostgreSQL's
//! planner may read every entry under that status of an index on it (there
//! was one, `tasks_by_status`, until migration 0011), and
//! hash-join them with the batch, instead of looking each row up by its
//! id: it estimates the live tasks of one status as few, but the entries
//! it then reads include one per task in that status on the fleet, and one
//! for every earlier transition to it that vacuum has not yet removed
//! (`status` is indexed, so each transition adds an entry). Measured in
//! the dispatch benchmark, a turn's finish statement read 44,064 entries to
//! update 27 rows. With the status a value of the row, the row's id is the
//! only key the planner can look the task up by.
//!
//! [`values::run`]: super::values::run

use super::values::{Col, Param};
use crate::model::TaskStatus;

/// PostgreSQL, for the rest of a batch's transaction: the writes look their
/// rows up by key, one index lookup per row of the batch (the only plan
/// left once the status a write expects is a value of its row). Its cost
/// model, made for rows on disk, otherwise prefers to read the whole
/// `tasks` or `attempts` table and hash-join it with the batch until the
/// table holds some hundred thousand rows: every turn would read every
/// task. A batch's rows are few and their keys known.
pub(super) const LOOKUP_BY_KEY: &str = "SET LOCAL enable_seqscan = off; \
     SET LOCAL enable_bitmapscan = off; SET LOCAL enable_hashjoin = off; \
     SET LOCAL enable_mergejoin = off";

pub(super) const INSERT_TASKS: &str =
    "WITH v(v_name, v_adapter, v_kind, v_params, v_priority, v_max_attempts, v_timeout, v_resources, \
         v_version, v_progress_timeout, v_team) AS (VALUES {values}) \
     INSERT INTO tasks (name, adapter, kind, params, priority, max_attempts, timeout_secs, \
         resources, adapter_version, progress_timeout_secs, team, status, attempt, runs, cancel_requested, created_at_ms, updated_at_ms) \
     SELECT v_name, v_adapter, v_kind, v_params, v_priority, v_max_attempts, v_timeout, \
         v_resources, v_version, v_progress_timeout, v_team, 'PENDING', 0, 0, 0, {now}, {now} \
     FROM v WHERE v_adapter IS NOT NULL \
     RETURNING id";
pub(super) const INSERT_COLS: &[Col] = &[
    Col::Text,
    Col::Text,
    Col::Text,
    Col::Text,
    Col::Int,
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Text,
    Col::Int,
    Col::Text,
];

/// Returns what the Dispatch messages need (`rows::PAYLOAD_COLUMNS`, `id`
/// first), so that no read precedes the transaction.
pub(super) fn dispatch_tasks() -> String {
    format!(
        "WITH v(v_id, v_from, v_attempt, v_host, v_deadline, v_expect) AS (VALUES {{values}}) \
         UPDATE tasks SET status = 'DISPATCHED', attempt = v_attempt, host_id = v_host, slot = NULL, \
             progress = NULL, cancel_requested = 0, dispatch_deadline_ms = v_deadline, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND status = v_expect AND attempt = v_from AND v_attempt > v_from \
         RETURNING {}",
        super::rows::PAYLOAD_COLUMNS
    )
}
pub(super) const DISPATCH_COLS: &[Col] =
    &[Col::Int, Col::Int, Col::Int, Col::Text, Col::Int, Col::Text];

pub(super) const DISPATCH_ATTEMPTS: &str =
    "WITH v(v_id, v_attempt, v_host, v_version) AS (VALUES {values}) \
     INSERT INTO attempts (task_id, attempt, host_id, adapter_version, dispatched_at_ms) \
     SELECT v_id, v_attempt, v_host, v_version, {now} FROM v WHERE v_id IS NOT NULL";
pub(super) const DISPATCH_ATTEMPT_COLS: &[Col] = &[Col::Int, Col::Int, Col::Text, Col::Text];

pub(super) const START_TASKS: &str =
    "WITH v(v_id, v_attempt, v_slot, v_expect) AS (VALUES {values}) \
     UPDATE tasks SET status = 'RUNNING', runs = runs + 1, slot = v_slot, \
         started_at_ms = COALESCE(started_at_ms, {now}), dispatch_deadline_ms = NULL, updated_at_ms = {now} \
     FROM v WHERE id = v_id AND status = v_expect AND attempt = v_attempt \
     RETURNING id";
pub(super) const START_ATTEMPTS: &str =
    "WITH v(v_id, v_attempt, v_slot, v_assignment) AS (VALUES {values}) \
     UPDATE attempts SET slot = v_slot, started_at_ms = {now}, assignment = v_assignment \
     FROM v WHERE task_id = v_id AND attempt = v_attempt";
pub(super) const START_COLS: &[Col] = &[Col::Int, Col::Int, Col::Int, Col::Text];
pub(super) const START_ATTEMPT_COLS: &[Col] = &[Col::Int, Col::Int, Col::Int, Col::Text];

/// Only where none is recorded: the host's own word at its start wins.
pub(super) const ASSIGN_ATTEMPTS: &str =
    "WITH v(v_id, v_attempt, v_assignment) AS (VALUES {values}) \
     UPDATE attempts SET assignment = v_assignment \
     FROM v WHERE task_id = v_id AND attempt = v_attempt AND assignment IS NULL \
     RETURNING task_id";
pub(super) const ASSIGN_COLS: &[Col] = &[Col::Int, Col::Int, Col::Text];

/// Replaces the stored checkpoint where the row brings one (`v_ck = 1`).
const CHECKPOINT_SET: &str =
    "checkpoint_attempt = CASE WHEN v_ck = 1 THEN v_ck_attempt ELSE checkpoint_attempt END, \
     checkpoint_kind = CASE WHEN v_ck = 1 THEN v_ck_kind ELSE checkpoint_kind END, \
     checkpoint_name = CASE WHEN v_ck = 1 THEN v_ck_name ELSE checkpoint_name END, \
     checkpoint_data = CASE WHEN v_ck = 1 THEN v_ck_data ELSE checkpoint_data END, \
     checkpoint_object = CASE WHEN v_ck = 1 THEN v_ck_object ELSE checkpoint_object END";
const CHECKPOINT_COLS: [Col; 6] = [
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Text,
    Col::Blob,
    Col::Text,
];

/// DISPATCHED or RUNNING: the row's [`live`] columns.
const LIVE: &str = "status IN (v_expect, v_expect_or)";
/// The types of a row's [`live`] columns, its last two.
const LIVE_COLS: [Col; 2] = [Col::Text, Col::Text];

/// The value of a row's `v_expect` for a write that expects `status`.
pub(super) fn expect(status: TaskStatus) -> Param<'static> {
    Param::text(status.as_str())
}

/// The values of a row's `v_expect` and `v_expect_or` for a write to a
/// live attempt ([`LIVE`]).
pub(super) fn live() -> [Param<'static>; 2] {
    [expect(TaskStatus::Dispatched), expect(TaskStatus::Running)]
}

pub(super) fn progress_tasks() -> String {
    format!(
        "WITH v(v_id, v_attempt, v_progress, v_ck, v_ck_attempt, v_ck_kind, v_ck_name, v_ck_data, v_ck_object, \
             v_expect, v_expect_or) AS (VALUES {{values}}) \
         UPDATE tasks SET progress = v_progress, {CHECKPOINT_SET}, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND attempt = v_attempt AND {LIVE} \
         RETURNING id"
    )
}

/// The columns of [`progress_tasks`]'s rows.
pub(super) fn progress_cols() -> Vec<Col> {
    [Col::Int, Col::Int, Col::Text]
        .into_iter()
        .chain(CHECKPOINT_COLS)
        .chain(LIVE_COLS)
        .collect()
}

/// A finish row that carries its attempt's start (`v_started = 1`, see
/// [`batch::plan`]) does what [`START_TASKS`] would have done first, where
/// that start would have applied: on a task still DISPATCHED. The
/// expressions of a `SET` read the row as it was before the update.
///
/// [`batch::plan`]: super::batch::plan
const STARTS_HERE: &str = "v_started = 1 AND status = 'DISPATCHED'";

pub(super) fn finish_tasks() -> String {
    // Requeue (`v_status = 'PENDING'`) frees the host and slot and leaves the
    // task unfinished; every other outcome is terminal and keeps the host
    // for history. An attempt that did not use one of the task's
    // (`v_counted = 0`, the host's fault) takes back the run its start
    // counted.
    format!(
        "WITH v(v_id, v_attempt, v_status, v_result, v_error, v_ck, v_ck_attempt, v_ck_kind, v_ck_name, v_ck_data, v_ck_object, \
             v_started, v_slot, v_counted, v_expect, v_expect_or) AS (VALUES {{values}}) \
         UPDATE tasks SET status = v_status, result = COALESCE(v_result, result), \
             error = COALESCE(v_error, error), \
             host_id = CASE WHEN v_status = 'PENDING' THEN NULL ELSE host_id END, \
             slot = CASE WHEN v_status = 'PENDING' THEN NULL WHEN {STARTS_HERE} THEN v_slot ELSE slot END, \
             runs = CASE WHEN {STARTS_HERE} THEN runs + v_counted \
                 WHEN v_counted = 0 AND status = 'RUNNING' THEN runs - 1 ELSE runs END, \
             started_at_ms = CASE WHEN {STARTS_HERE} THEN COALESCE(started_at_ms, {{now}}) ELSE started_at_ms END, \
             cancel_requested = CASE WHEN v_status = 'PENDING' THEN 0 ELSE cancel_requested END, \
             dispatch_deadline_ms = NULL, \
             finished_at_ms = CASE WHEN v_status = 'PENDING' THEN NULL ELSE {{now}} END, \
             {CHECKPOINT_SET}, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND attempt = v_attempt AND {LIVE} \
         RETURNING id"
    )
}

/// The columns of [`finish_tasks`]'s rows.
pub(super) fn finish_cols() -> Vec<Col> {
    [Col::Int, Col::Int, Col::Text, Col::Text, Col::Text]
        .into_iter()
        .chain(CHECKPOINT_COLS)
        .chain([Col::Int, Col::Int, Col::Int])
        .chain(LIVE_COLS)
        .collect()
}

/// A row that carries its attempt's start (`v_started = 1`) also does what
/// [`START_ATTEMPTS`] would have, where that start would have applied: an
/// attempt row has no start time until its start applies.
pub(super) const FINISH_ATTEMPTS: &str =
    "WITH v(v_id, v_attempt, v_outcome, v_error, v_metrics, v_started, v_slot, v_assignment) \
         AS (VALUES {values}) \
     UPDATE attempts SET finished_at_ms = {now}, outcome = v_outcome, error = v_error, metrics = v_metrics, \
         slot = CASE WHEN v_started = 1 AND started_at_ms IS NULL THEN v_slot ELSE slot END, \
         assignment = CASE WHEN v_started = 1 AND started_at_ms IS NULL THEN v_assignment ELSE assignment END, \
         started_at_ms = CASE WHEN v_started = 1 AND started_at_ms IS NULL THEN {now} ELSE started_at_ms END \
     FROM v WHERE task_id = v_id AND attempt = v_attempt";
pub(super) const FINISH_ATTEMPT_COLS: &[Col] = &[
    Col::Int,
    Col::Int,
    Col::Text,
    Col::Text,
    Col::Text,
    Col::Int,
    Col::Int,
    Col::Text,
];

pub(super) fn request_cancel() -> String {
    format!(
        "WITH v(v_id, v_attempt, v_expect, v_expect_or) AS (VALUES {{values}}) \
         UPDATE tasks SET cancel_requested = 1, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND attempt = v_attempt AND {LIVE} \
         RETURNING id"
    )
}
pub(super) const REQUEST_CANCEL_COLS: &[Col] = &[Col::Int, Col::Int, Col::Text, Col::Text];

pub(super) const CANCEL_PENDING: &str = "WITH v(v_id, v_expect) AS (VALUES {values}) \
     UPDATE tasks SET status = 'CANCELLED', finished_at_ms = {now}, updated_at_ms = {now} \
     FROM v WHERE id = v_id AND status = v_expect \
     RETURNING id";
pub(super) const CANCEL_PENDING_COLS: &[Col] = &[Col::Int, Col::Text];
