//! Task endpoints: submit (one or a batch), list, show, cancel.

use super::audit;
use super::auth::Caller;
use super::error::{ApiError, Body};
use super::{AppState, PlacementView};
use crate::access::{Action, AdapterRules};
use crate::model::{NewTask, TaskDetail, TaskStatus};
use crate::scheduler::{CancelOutcome, SubmitError};
use crate::store::{Store, TaskFilter};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use trainyard_proto::adapter_version::{split_spec, VersionPin};
use trainyard_proto::resources::{memory_amount, ResourceRequest};
use trainyard_proto::{now_ms, TaskId};

/// Largest params document accepted per task.
const MAX_PARAMS_BYTES: usize = 1 << 20;
/// Most tasks in one batch submission.
pub const MAX_BATCH: usize = 10_000;
/// Longest wall-clock limit a task may ask for: 30 days. Also the longest
/// progress timeout.
const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

/// A task as an operator submits it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitTask {
    /// The adapter that runs the task, as `name` or `name@requirement`
    /// (a semver requirement on its version: `ppo@=1.2.0`, `ppo@^1.2`).
    pub adapter: String,
    /// One of the adapter's kinds; its first when omitted.
    #[serde(default)]
    pub kind: Option<String>,
    /// A JSON object, handed to the adapter as is.
    #[serde(default)]
    pub params: Option<Value>,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// No progress event for this long ends an attempt as stalled. Signed,
    /// so that a negative value is refused with a message of ours.
    #[serde(default)]
    pub progress_timeout_secs: Option<i64>,
    #[serde(default)]
    pub name: Option<String>,
    /// What the task needs on one host.
    #[serde(default)]
    pub resources: Option<SubmitResources>,
}

/// A resource request as submitted: `{"cpus": 2, "memory": "4GiB", "gpus": 1}`
/// (memory in bytes, or text with a unit).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitResources {
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default, deserialize_with = "memory_amount::deserialize")]
    pub memory: Option<u64>,
    #[serde(default)]
    pub gpus: Option<u32>,
}

impl SubmitResources {
    fn request(self) -> Result<ResourceRequest, String> {
        let request = ResourceRequest {
            cpus: self.cpus,
            memory_bytes: self.memory,
            gpus: self.gpus.unwrap_or(0),
        };
        request
            .validate()
            .map_err(|e| format!("\"resources\": {e}"))?;
        Ok(request)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitBatch {
    pub tasks: Vec<SubmitTask>,
}

impl SubmitTask {
    /// Checks everything that can be checked without the scheduler; the
    /// task is `team`'s.
    pub fn validate(self, default_max_attempts: u32, team: &str) -> Result<NewTask, String> {
        let (adapter, version) = split_spec(self.adapter.trim());
        if adapter.is_empty() || adapter.len() > 64 {
            return Err("\"adapter\" must be a non-empty adapter name of at most 64 bytes".into());
        }
        let adapter = adapter.to_string();
        let version = version
            .map(VersionPin::parse)
            .transpose()
            .map_err(|e| format!("\"adapter\": the version after @ {e}"))?;
        let params = self.params.unwrap_or_else(|| json!({}));
        if !params.is_object() {
            return Err(format!(
                "\"params\" must be a JSON object, got {}",
                kind_of(&params)
            ));
        }
        let params = params.to_string();
        if params.len() > MAX_PARAMS_BYTES {
            return Err(format!(
                "\"params\" is {} bytes; the limit is {MAX_PARAMS_BYTES}",
                params.len()
            ));
        }
        let max_attempts = self.max_attempts.unwrap_or(default_max_attempts);
        if !(1..=100).contains(&max_attempts) {
            return Err(format!(
                "\"max_attempts\" must be between 1 and 100, got {max_attempts}"
            ));
        }
        if let Some(t) = self.timeout_secs {
            if t == 0 || t > MAX_TIMEOUT_SECS {
                return Err(format!(
                    "\"timeout_secs\" must be between 1 and {MAX_TIMEOUT_SECS}, got {t}"
                ));
            }
        }
        let progress_timeout_secs = self
            .progress_timeout_secs
            .map(progress_timeout)
            .transpose()?;
        if self.name.as_ref().is_some_and(|n| n.len() > 256) {
            return Err("\"name\" must be at most 256 bytes".into());
        }
        let kind = self.kind.unwrap_or_default();
        if kind.len() > 64 {
            return Err("\"kind\" must be at most 64 bytes".into());
        }
        let resources = self.resources.unwrap_or_default().request()?;
        Ok(NewTask {
            name: self.name,
            adapter,
            version,
            kind,
            params,
            priority: self.priority.unwrap_or(0),
            max_attempts,
            timeout_secs: self.timeout_secs,
            progress_timeout_secs,
            resources,
            team: team.to_string(),
        })
    }
}

/// A submitted `progress_timeout_secs`, checked.
fn progress_timeout(secs: i64) -> Result<u64, String> {
    u64::try_from(secs)
        .ok()
        .filter(|s| (1..=MAX_TIMEOUT_SECS).contains(s))
        .ok_or_else(|| {
            format!(
                "\"progress_timeout_secs\" must be between 1 and {MAX_TIMEOUT_SECS} seconds, got {secs}"
            )
        })
}

/// The team `caller` submits for, or 403.
pub(super) fn submit_team(caller: &Caller) -> Result<String, ApiError> {
    caller
        .principal
        .submit_team()
        .map(str::to_string)
        .map_err(ApiError::forbidden)
}

/// Applies the team's adapter rules (`master.team_adapters`) to a checked
/// task: 403 when its team may not run its adapter; otherwise the task
/// runs under the team's version range as well as its own.
pub(super) fn admit(rules: &AdapterRules, mut task: NewTask) -> Result<NewTask, String> {
    task.version = rules.admit(&task.team, &task.adapter, task.version.take())?;
    Ok(task)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn submit_error(e: SubmitError) -> ApiError {
    match e {
        SubmitError::Unavailable(m) => ApiError::unavailable(m),
        other => ApiError::unprocessable(other.to_string()),
    }
}

pub async fn submit(
    State(app): State<AppState>,
    caller: Caller,
    Body(task): Body<SubmitTask>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let team = submit_team(&caller)?;
    let task = task
        .validate(app.default_max_attempts, &team)
        .map_err(ApiError::unprocessable)?;
    let task = admit(&app.adapter_rules, task).map_err(ApiError::forbidden)?;
    let detail = json!({ "adapter": task.adapter, "team": team });
    let ids = app
        .scheduler
        .submit(vec![task])
        .await
        .map_err(submit_error)?;
    let id = ids
        .first()
        .copied()
        .ok_or_else(|| ApiError::unavailable("no id returned"))?;
    audit::record(
        &app.store,
        &caller,
        "task.submit",
        format!("task {id}"),
        Some(detail),
    )
    .await;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "id": id, "status": TaskStatus::Pending })),
    ))
}

pub async fn submit_batch(
    State(app): State<AppState>,
    caller: Caller,
    Body(batch): Body<SubmitBatch>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let team = submit_team(&caller)?;
    if batch.tasks.is_empty() || batch.tasks.len() > MAX_BATCH {
        return Err(ApiError::unprocessable(format!(
            "a batch holds 1 to {MAX_BATCH} tasks, got {}",
            batch.tasks.len()
        )));
    }
    let tasks = batch
        .tasks
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.validate(app.default_max_attempts, &team)
                .map_err(|e| format!("task {i}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::unprocessable)?;
    let tasks = tasks
        .into_iter()
        .enumerate()
        .map(|(i, t)| admit(&app.adapter_rules, t).map_err(|e| format!("task {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::forbidden)?;
    let ids = app.scheduler.submit(tasks).await.map_err(submit_error)?;
    let target = match (ids.first(), ids.last()) {
        (Some(first), Some(last)) => format!("tasks {first}..{last}"),
        _ => "tasks".to_string(),
    };
    let detail = json!({ "team": team, "count": ids.len(), "ids": ids });
    audit::record(&app.store, &caller, "task.submit", target, Some(detail)).await;
    Ok((StatusCode::CREATED, Json(json!({ "ids": ids }))))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub status: Option<String>,
    pub adapter: Option<String>,
    /// Only tasks submitted with exactly this name.
    pub name: Option<String>,
    /// Only this team's tasks (a team's principal sees only its own).
    pub team: Option<String>,
    pub limit: Option<u32>,
    pub before: Option<TaskId>,
}

pub async fn list(
    State(store): State<Store>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.may(Action::Read)?;
    let asked = q.team.filter(|t| !t.is_empty());
    let team = match (caller.principal.scope(), asked) {
        (Some(mine), Some(asked)) if mine != asked => {
            return Ok(Json(json!({ "tasks": [] })));
        }
        (Some(mine), _) => Some(mine.to_string()),
        (None, asked) => asked,
    };
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(TaskStatus::parse(s).ok_or_else(|| {
            let all: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!(
                "unknown status {s:?}; use one of {}",
                all.join(", ")
            ))
        })?),
    };
    let filter = TaskFilter {
        status,
        adapter: q.adapter.filter(|a| !a.is_empty()),
        name: q.name.filter(|n| !n.is_empty()),
        team,
        limit: q.limit.unwrap_or(0),
        before_id: q.before,
    };
    let tasks = store.tasks(&filter).await?;
    Ok(Json(json!({ "tasks": tasks })))
}

/// One task; a pending one says why it waits when this master schedules
/// (a standby does not know).
pub async fn show(
    State(store): State<Store>,
    State(placement): State<PlacementView>,
    caller: Caller,
    Path(id): Path<TaskId>,
) -> Result<Json<TaskDetail>, ApiError> {
    match store.task(id).await? {
        Some(mut detail) => {
            caller.may_on(Action::Read, &detail.task.team, || format!("no task {id}"))?;
            if let (TaskStatus::Pending, Some(placement)) = (detail.task.status, &placement.0) {
                detail.waiting = Some(placement.borrow().why_waiting(&detail.task));
            }
            detail.quiet_for_ms = crate::stall::detail_quiet_for_ms(&detail, now_ms());
            Ok(Json(detail))
        }
        None => Err(ApiError::not_found(format!("no task {id}"))),
    }
}

pub async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<TaskId>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Some(detail) = app.store.task(id).await? else {
        return Err(ApiError::not_found(format!("no task {id}")));
    };
    caller.may_on(Action::Cancel, &detail.task.team, || {
        format!("no task {id}")
    })?;
    if detail.task.status.is_terminal() {
        return Err(ApiError::conflict(format!(
            "task {id} already ended {}",
            detail.task.status
        )));
    }
    let outcome = app.scheduler.cancel(id).await?;
    if matches!(
        outcome,
        CancelOutcome::Cancelled | CancelOutcome::CancelRequested
    ) {
        audit::record(
            &app.store,
            &caller,
            "task.cancel",
            format!("task {id}"),
            None,
        )
        .await;
    }
    match outcome {
        CancelOutcome::Cancelled => Ok((
            StatusCode::OK,
            Json(json!({ "id": id, "status": TaskStatus::Cancelled })),
        )),
        CancelOutcome::CancelRequested => Ok((
            StatusCode::ACCEPTED,
            Json(json!({ "id": id, "status": detail.task.status, "cancel_requested": true })),
        )),
        CancelOutcome::NotLive => {
            let status = app.store.task(id).await?.map(|t| t.task.status);
            Err(ApiError::conflict(format!(
                "task {id} is not queued or running (now {})",
                status.map(|s| s.as_str()).unwrap_or("gone")
            )))
        }
        CancelOutcome::Unavailable => Err(ApiError::unavailable(
            "the cancellation could not be recorded; try again",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(v: Value) -> Result<NewTask, String> {
        serde_json::from_value::<SubmitTask>(v)
            .map_err(|e| e.to_string())?
            .validate(3, "default")
    }

    #[test]
    fn an_adapter_may_be_pinned_to_a_version_range() {
        let t = task(json!({"adapter": "ppo@^1.2"})).unwrap();
        assert_eq!(t.adapter, "ppo");
        assert_eq!(t.version.map(|v| v.to_string()).as_deref(), Some("^1.2"));
        assert_eq!(task(json!({"adapter": "ppo"})).unwrap().version, None);
        let bad = task(json!({"adapter": "ppo@newest"})).unwrap_err();
        assert!(
            bad.contains("\"newest\" is not a semver version requirement"),
            "{bad}"
        );
        assert!(task(json!({"adapter": "@1.0.0"})).is_err());
    }

    #[test]
    fn a_progress_timeout_must_be_a_positive_number_of_seconds() {
        let t = task(json!({"adapter": "ppo", "progress_timeout_secs": 90})).unwrap();
        assert_eq!(t.progress_timeout_secs, Some(90));
        assert_eq!(
            task(json!({"adapter": "ppo"}))
                .unwrap()
                .progress_timeout_secs,
            None
        );
        for bad in [0, -5] {
            let e = task(json!({"adapter": "ppo", "progress_timeout_secs": bad})).unwrap_err();
            assert!(
                e.contains("\"progress_timeout_secs\" must be between 1 and")
                    && e.ends_with(&format!("got {bad}")),
                "{e}"
            );
        }
        let e = task(json!({"adapter": "ppo", "progress_timeout_secs": 99_999_999})).unwrap_err();
        assert!(e.contains("progress_timeout_secs"), "{e}");
    }

    #[test]
    fn a_minimal_submission_gets_defaults() {
        let t = task(json!({"adapter": "python-trainer"})).unwrap();
        assert_eq!(
            (t.params.as_str(), t.max_attempts, t.priority),
            ("{}", 3, 0)
        );
    }

    #[test]
    fn bad_submissions_say_what_is_wrong() {
        assert!(task(json!({"params": {}}))
            .unwrap_err()
            .contains("missing field `adapter`"));
        assert!(task(json!({"adapter": "a", "params": [1]}))
            .unwrap_err()
            .contains("must be a JSON object, got an array"));
        assert!(task(json!({"adapter": "a", "max_attempts": 0}))
            .unwrap_err()
            .contains("max_attempts"));
        assert!(task(json!({"adapter": "a", "priorty": 1}))
            .unwrap_err()
            .contains("unknown field `priorty`"));
        assert!(task(json!({"adapter": ""}))
            .unwrap_err()
            .contains("adapter"));
    }

    #[test]
    fn resources_are_read_with_memory_units_and_checked() {
        let t =
            task(json!({"adapter": "a", "resources": {"cpus": 2, "memory": "4GiB", "gpus": 1}}))
                .unwrap();
        assert_eq!(
            t.resources,
            ResourceRequest {
                cpus: Some(2.0),
                memory_bytes: Some(4 << 30),
                gpus: 1
            }
        );
        let t = task(json!({"adapter": "a", "resources": {"memory": 1048576}})).unwrap();
        assert_eq!(t.resources.memory_bytes, Some(1 << 20));
        assert!(task(json!({"adapter": "a", "resources": {"cpus": -1}}))
            .unwrap_err()
            .contains("\"cpus\""));
        assert!(
            task(json!({"adapter": "a", "resources": {"memory": "lots"}}))
                .unwrap_err()
                .contains("lots")
        );
        assert!(task(json!({"adapter": "a", "resources": {"gpu": 1}}))
            .unwrap_err()
            .contains("unknown field `gpu`"));
    }
}
