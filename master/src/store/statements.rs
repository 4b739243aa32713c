//! The statements of a batch, as templates for [`values::run`]: `{values}`
//! takes the rows of a `WITH v(..) AS (VALUES ..)` list, `{now}` the batch
//! clock. The column lists (`*_COLS`) type the rows, in `v`'s column order.
//!
//! Each task statement is a compare-and-set: its `WHERE` names the status
//! and attempt the write expects, and `RETURNING id` says which rows
//! matched. The CTE columns are all prefixed `v_`, so that `id`, `status`
//! and `attempt` always mean the table's columns.
//!
//! [`values::run`]: super::values::run

use super::values::Col;

pub(super) const INSERT_TASKS: &str =
    "WITH v(v_name, v_adapter, v_kind, v_params, v_priority, v_max_attempts, v_timeout, v_resources, \
         v_version) AS (VALUES {values}) \
     INSERT INTO tasks (name, adapter, kind, params, priority, max_attempts, timeout_secs, \
         resources, adapter_version, status, attempt, runs, cancel_requested, created_at_ms, updated_at_ms) \
     SELECT v_name, v_adapter, v_kind, v_params, v_priority, v_max_attempts, v_timeout, \
         v_resources, v_version, 'PENDING', 0, 0, 0, {now}, {now} \
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
];

/// Returns what the Dispatch messages need (`rows::PAYLOAD_COLUMNS`, `id`
/// first), so that no read precedes the transaction.
pub(super) fn dispatch_tasks() -> String {
    format!(
        "WITH v(v_id, v_from, v_attempt, v_host, v_deadline) AS (VALUES {{values}}) \
         UPDATE tasks SET status = 'DISPATCHED', attempt = v_attempt, host_id = v_host, slot = NULL, \
             progress = NULL, cancel_requested = 0, dispatch_deadline_ms = v_deadline, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND status = 'PENDING' AND attempt = v_from AND v_attempt > v_from \
         RETURNING {}",
        super::rows::PAYLOAD_COLUMNS
    )
}
pub(super) const DISPATCH_COLS: &[Col] = &[Col::Int, Col::Int, Col::Int, Col::Text, Col::Int];

pub(super) const DISPATCH_ATTEMPTS: &str =
    "WITH v(v_id, v_attempt, v_host, v_version) AS (VALUES {values}) \
     INSERT INTO attempts (task_id, attempt, host_id, adapter_version, dispatched_at_ms) \
     SELECT v_id, v_attempt, v_host, v_version, {now} FROM v WHERE v_id IS NOT NULL";
pub(super) const DISPATCH_ATTEMPT_COLS: &[Col] = &[Col::Int, Col::Int, Col::Text, Col::Text];

pub(super) const START_TASKS: &str = "WITH v(v_id, v_attempt, v_slot) AS (VALUES {values}) \
     UPDATE tasks SET status = 'RUNNING', runs = runs + 1, slot = v_slot, \
         started_at_ms = COALESCE(started_at_ms, {now}), dispatch_deadline_ms = NULL, updated_at_ms = {now} \
     FROM v WHERE id = v_id AND status = 'DISPATCHED' AND attempt = v_attempt \
     RETURNING id";
pub(super) const START_ATTEMPTS: &str =
    "WITH v(v_id, v_attempt, v_slot, v_assignment) AS (VALUES {values}) \
     UPDATE attempts SET slot = v_slot, started_at_ms = {now}, assignment = v_assignment \
     FROM v WHERE task_id = v_id AND attempt = v_attempt";
pub(super) const START_COLS: &[Col] = &[Col::Int, Col::Int, Col::Int];
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
     checkpoint_data = CASE WHEN v_ck = 1 THEN v_ck_data ELSE checkpoint_data END";
pub(super) const CHECKPOINT_COLS: [Col; 5] = [Col::Int, Col::Int, Col::Text, Col::Text, Col::Blob];

const LIVE: &str = "status IN ('DISPATCHED', 'RUNNING')";

pub(super) fn progress_tasks() -> String {
    format!(
        "WITH v(v_id, v_attempt, v_progress, v_ck, v_ck_attempt, v_ck_kind, v_ck_name, v_ck_data) \
         AS (VALUES {{values}}) \
         UPDATE tasks SET progress = v_progress, {CHECKPOINT_SET}, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND attempt = v_attempt AND {LIVE} \
         RETURNING id"
    )
}

pub(super) fn finish_tasks() -> String {
    // Requeue (`v_status = 'PENDING'`) frees the host and slot and leaves the
    // task unfinished; every other outcome is terminal and keeps the host
    // for history.
    format!(
        "WITH v(v_id, v_attempt, v_status, v_result, v_error, v_ck, v_ck_attempt, v_ck_kind, v_ck_name, v_ck_data) \
         AS (VALUES {{values}}) \
         UPDATE tasks SET status = v_status, result = COALESCE(v_result, result), \
             error = COALESCE(v_error, error), \
             host_id = CASE WHEN v_status = 'PENDING' THEN NULL ELSE host_id END, \
             slot = CASE WHEN v_status = 'PENDING' THEN NULL ELSE slot END, \
             cancel_requested = CASE WHEN v_status = 'PENDING' THEN 0 ELSE cancel_requested END, \
             dispatch_deadline_ms = NULL, \
             finished_at_ms = CASE WHEN v_status = 'PENDING' THEN NULL ELSE {{now}} END, \
             {CHECKPOINT_SET}, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND attempt = v_attempt AND {LIVE} \
         RETURNING id"
    )
}

pub(super) const FINISH_ATTEMPTS: &str = "WITH v(v_id, v_attempt, v_outcome, v_error, v_metrics) AS (VALUES {values}) \
     UPDATE attempts SET finished_at_ms = {now}, outcome = v_outcome, error = v_error, metrics = v_metrics \
     FROM v WHERE task_id = v_id AND attempt = v_attempt";
pub(super) const FINISH_ATTEMPT_COLS: &[Col] =
    &[Col::Int, Col::Int, Col::Text, Col::Text, Col::Text];

pub(super) fn request_cancel() -> String {
    format!(
        "WITH v(v_id, v_attempt) AS (VALUES {{values}}) \
         UPDATE tasks SET cancel_requested = 1, updated_at_ms = {{now}} \
         FROM v WHERE id = v_id AND attempt = v_attempt AND {LIVE} \
         RETURNING id"
    )
}
pub(super) const REQUEST_CANCEL_COLS: &[Col] = &[Col::Int, Col::Int];

pub(super) const CANCEL_PENDING: &str = "WITH v(v_id) AS (VALUES {values}) \
     UPDATE tasks SET status = 'CANCELLED', finished_at_ms = {now}, updated_at_ms = {now} \
     FROM v WHERE id = v_id AND status = 'PENDING' \
     RETURNING id";
pub(super) const CANCEL_PENDING_COLS: &[Col] = &[Col::Int];
