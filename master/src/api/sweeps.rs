//! Sweep endpoints: create (the spec, expanded and checked before anything
//! is stored; the sweep and its trials stored in one transaction), list,
//! show (ranked over seeds), cancel (the sweep, then its unfinished trials).

use super::audit;
use super::auth::Caller;
use super::error::{ApiError, Body};
use super::tasks::{admit, submit_team, SubmitTask, MAX_BATCH};
use super::AppState;
use crate::access::Action;
use crate::model::NewTask;
use crate::scheduler::{CancelOutcome, SubmitError};
use crate::search::spec::{self, Expansion, SweepSpec};
use crate::search::{self, NewSweep, SweepDetail, SweepId, SweepSummary};
use crate::store::Store;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use trainyard_proto::messages::AdapterInfo;

/// Checks a spec and turns it into the sweep and its trials' tasks.
fn plan(
    spec: SweepSpec,
    default_max_attempts: u32,
    team: &str,
) -> Result<(NewSweep, Vec<NewTask>), String> {
    let spec = spec.with_seed(rand::random());
    let Expansion {
        configs, trials, ..
    } = spec::expand(&spec, MAX_BATCH)?;
    let resources = || {
        spec.resources
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| format!("\"resources\": {e}"))
    };
    let tasks = trials
        .iter()
        .map(|t| {
            SubmitTask {
                adapter: spec.adapter.clone(),
                kind: spec.kind.clone(),
                params: Some(Value::Object(t.params.clone())),
                priority: spec.priority,
                max_attempts: spec.max_attempts,
                timeout_secs: spec.timeout_secs,
                progress_timeout_secs: spec.progress_timeout_secs,
                name: spec.name.clone(),
                resources: resources()?,
            }
            .validate(default_max_attempts, team)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let sweep = NewSweep {
        team: team.to_string(),
        name: spec.name.clone(),
        adapter: tasks[0].adapter.clone(),
        kind: String::new(),
        spec: serde_json::to_string(&spec).map_err(|e| e.to_string())?,
        configs: serde_json::to_string(&configs).map_err(|e| e.to_string())?,
        metric: spec.metric.trim().to_string(),
        direction: spec.direction,
        trials: trials.iter().map(|t| (t.config, t.seed)).collect(),
    };
    Ok((sweep, tasks))
}

pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    Body(spec): Body<SweepSpec>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let team = submit_team(&caller)?;
    let (sweep, tasks) =
        plan(spec, app.default_max_attempts, &team).map_err(ApiError::unprocessable)?;
    let tasks = tasks
        .into_iter()
        .map(|t| admit(&app.adapter_rules, t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::forbidden)?;
    // Connected hosts as the scheduler knows them (their record may not be
    // written yet), and every host seen before.
    let live = app.scheduler.hosts().await?;
    let recorded = app.store.hosts().await?;
    let carried = live
        .iter()
        .flat_map(|h| &h.adapters)
        .chain(recorded.iter().flat_map(|h| &h.adapters));
    let declared = declared_metrics(carried, &sweep.adapter);
    let reported = app.store.reported_metrics(&sweep.adapter).await?;
    let metric_checked = check_metric(&sweep.adapter, &sweep.metric, &declared, &reported)
        .map_err(ApiError::unprocessable)?;
    let configs = serde_json::from_str::<Vec<Value>>(&sweep.configs).map_or(0, |c| c.len());
    let created = app
        .scheduler
        .create_sweep(sweep, tasks)
        .await
        .map_err(|e| match e {
            SubmitError::Unavailable(m) => ApiError::unavailable(m),
            other => ApiError::unprocessable(other.to_string()),
        })?;
    let detail = json!({ "team": team, "trials": created.tasks.len() });
    audit::record(
        &app.store,
        &caller,
        "sweep.create",
        format!("sweep {}", created.id),
        Some(detail),
    )
    .await;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": created.id,
            "configs": configs,
            "trials": created.tasks.len(),
            "tasks": created.tasks,
            "metric_checked": metric_checked,
        })),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub limit: Option<u32>,
    pub before: Option<SweepId>,
}

pub async fn list(
    State(store): State<Store>,
    caller: Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.may(Action::Read)?;
    let found = store
        .sweeps(q.limit.unwrap_or(100), q.before, caller.principal.scope())
        .await?;
    let sweeps: Vec<SweepSummary> = found
        .into_iter()
        .map(|(record, trials)| search::summary(record, &trials))
        .collect();
    Ok(Json(json!({ "sweeps": sweeps })))
}

pub async fn show(
    State(store): State<Store>,
    caller: Caller,
    Path(id): Path<SweepId>,
) -> Result<Json<SweepDetail>, ApiError> {
    let Some(s) = store.sweep(id).await? else {
        return Err(ApiError::not_found(format!("no sweep {id}")));
    };
    caller.may_on(Action::Read, &s.record.team, || format!("no sweep {id}"))?;
    Ok(Json(search::detail(
        s.record, s.spec, &s.configs, &s.trials,
    )))
}

/// Marks the sweep cancelled first, so that a master that dies before its
/// trials are all cancelled finishes the job at its next start.
pub async fn cancel(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<SweepId>,
) -> Result<Json<Value>, ApiError> {
    let Some(before) = app.store.sweep(id).await? else {
        return Err(ApiError::not_found(format!("no sweep {id}")));
    };
    caller.may_on(Action::Cancel, &before.record.team, || {
        format!("no sweep {id}")
    })?;
    if !app
        .store
        .cancel_sweep(id, trainyard_proto::now_ms())
        .await?
    {
        return Err(ApiError::not_found(format!("no sweep {id}")));
    }
    let Some(s) = app.store.sweep(id).await? else {
        return Err(ApiError::not_found(format!("no sweep {id}")));
    };
    let unfinished: Vec<_> = s
        .trials
        .iter()
        .filter(|t| !t.status.is_terminal())
        .map(|t| t.task)
        .collect();
    let outcomes = app.scheduler.cancel_many(&unfinished).await?;
    let detail = json!({ "trials": unfinished });
    audit::record(
        &app.store,
        &caller,
        "sweep.cancel",
        format!("sweep {id}"),
        Some(detail),
    )
    .await;
    let count = |o: CancelOutcome| outcomes.iter().filter(|x| **x == o).count();
    if count(CancelOutcome::Unavailable) > 0 {
        return Err(ApiError::unavailable(
            "the sweep is marked cancelled, but some trials could not be cancelled yet; \
             the master retries, or cancel again",
        ));
    }
    Ok(Json(json!({
        "id": id,
        "cancelled": count(CancelOutcome::Cancelled),
        "cancel_requested": count(CancelOutcome::CancelRequested),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_becomes_a_sweep_and_one_task_per_trial() {
        let spec: SweepSpec = serde_json::from_value(json!({
            "adapter": "python-trainer", "metric": "mean_return", "seeds": 3,
            "grid": {"learning_rate": [0.1, 0.5]}, "params": {"episodes": 40},
            "resources": {"cpus": 0.5}, "priority": 2, "progress_timeout_secs": 300
        }))
        .unwrap();
        let (sweep, tasks) = plan(spec, 3, "default").unwrap();
        assert_eq!(tasks.len(), 6);
        assert_eq!(sweep.trials.len(), 6);
        assert!(tasks
            .iter()
            .all(|t| t.priority == 2 && t.resources.cpus == Some(0.5)));
        assert!(
            tasks.iter().all(|t| t.progress_timeout_secs == Some(300)),
            "each trial gets the sweep's progress timeout"
        );
        let stored: Value = serde_json::from_str(&sweep.spec).unwrap();
        assert!(stored["sweep_seed"].is_u64(), "{stored}");
        assert_eq!(
            sweep.configs,
            r#"[{"learning_rate":0.1},{"learning_rate":0.5}]"#
        );
    }

    #[test]
    fn a_bad_trial_setting_refuses_the_whole_sweep() {
        let spec: SweepSpec = serde_json::from_value(json!({
            "adapter": "python-trainer", "metric": "m", "max_attempts": 0
        }))
        .unwrap();
        assert!(plan(spec, 3, "default")
            .unwrap_err()
            .contains("max_attempts"));
        let spec: SweepSpec = serde_json::from_value(json!({
            "adapter": "python-trainer", "metric": "m", "progress_timeout_secs": -1
        }))
        .unwrap();
        assert!(plan(spec, 3, "default")
            .unwrap_err()
            .contains("\"progress_timeout_secs\" must be between 1 and"));
    }
}

/// The metrics `adapter`'s results may hold, as the versions hosts have
/// carried declare them (contract 0.1.1); empty when none declares any.
fn declared_metrics<'a>(
    carried: impl Iterator<Item = &'a AdapterInfo>,
    adapter: &str,
) -> BTreeSet<String> {
    carried
        .filter(|a| a.name == adapter)
        .flat_map(|a| a.result_metrics.iter().cloned())
        .collect()
}

/// Whether a sweep's metric is one the adapter reports: against what its
/// versions declare, or else what its completed tasks have reported.
/// `Ok(true)` when it was checked, `Ok(false)` when there was nothing to
/// check it against yet.
fn check_metric(
    adapter: &str,
    metric: &str,
    declared: &BTreeSet<String>,
    reported: &BTreeSet<String>,
) -> Result<bool, String> {
    let list = |names: &BTreeSet<String>| names.iter().cloned().collect::<Vec<_>>().join(", ");
    if !declared.is_empty() {
        if declared.contains(metric) {
            return Ok(true);
        }
        return Err(format!(
            "{adapter} never reports a metric {metric:?}; it declares {}",
            list(declared)
        ));
    }
    if reported.is_empty() {
        return Ok(false);
    }
    if reported.contains(metric) {
        return Ok(true);
    }
    Err(format!(
        "{adapter} never reported a metric {metric:?}; its completed tasks report {}",
        list(reported)
    ))
}

#[cfg(test)]
mod metric_tests {
    use super::check_metric;
    use std::collections::BTreeSet;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_declared_list_wins_over_what_completed_tasks_reported() {
        let declared = set(&["mean_return", "success_rate"]);
        assert_eq!(
            check_metric("a", "mean_return", &declared, &set(&[])),
            Ok(true)
        );
        let refused = check_metric("a", "mean_retrun", &declared, &set(&["mean_retrun"]));
        assert_eq!(
            refused,
            Err(
                "a never reports a metric \"mean_retrun\"; it declares mean_return, success_rate"
                    .into()
            )
        );
        assert_eq!(
            check_metric("a", "loss", &set(&[]), &set(&["loss"])),
            Ok(true)
        );
        assert!(check_metric("a", "loss", &set(&[]), &set(&["acc"])).is_err());
        assert_eq!(
            check_metric("a", "anything", &set(&[]), &set(&[])),
            Ok(false)
        );
    }
}
