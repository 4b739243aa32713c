//! `GET /v1/hosts`: every host the master has seen, connected ones with what
//! they run right now, and whether each takes new work (drained,
//! quarantined). `POST /v1/hosts/{id}/drain` (`?now=true` stops what it
//! runs), `/undrain` and `/unquarantine` change that.

use super::audit;
use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use crate::access::Action;
use crate::model::HostStanding;
use crate::scheduler::standing::{StandingChange, StandingError};
use crate::scheduler::{FreeResources, HostSnapshot, RunningSnapshot};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use trainyard_proto::messages::{AdapterInfo, PythonEnvironment};
use trainyard_proto::resources::HostCapacity;
use trainyard_proto::HostId;

#[derive(Debug, Serialize)]
pub struct HostView {
    pub id: String,
    pub connected: bool,
    pub addr: Option<String>,
    pub slots: u32,
    pub free_slots: u32,
    /// CPUs, memory and GPUs it offers (as last declared).
    pub capacity: Option<HostCapacity>,
    /// What no attempt holds now (nothing while disconnected).
    pub free: FreeResources,
    pub adapters: Vec<AdapterInfo>,
    pub agent: String,
    /// The containment layers it enforces on trainers (while connected).
    pub containment: Vec<String>,
    /// The Python environments in its cache (while connected).
    pub environments: Vec<PythonEnvironment>,
    pub last_seen_ms: i64,
    pub running: Vec<RunningSnapshot>,
    /// `open`, `drained` or `quarantined` (quarantine first when both).
    pub state: &'static str,
    /// Why and since when it takes no new work.
    pub standing: HostStanding,
}

/// The one word for a host's standing.
pub fn state_word(standing: &HostStanding) -> &'static str {
    if standing.quarantine.is_some() {
        "quarantined"
    } else if standing.drained_at_ms.is_some() {
        "drained"
    } else {
        "open"
    }
}

pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    caller.may(Action::ReadFleet)?;
    let mut live = app.scheduler.hosts().await?;
    if let Some(team) = caller.principal.scope() {
        // Another team's tasks do not exist for a team's principal.
        for host in &mut live {
            let mut theirs = Vec::with_capacity(host.running.len());
            for r in host.running.drain(..) {
                if app.store.task_team(r.task).await?.as_deref() == Some(team) {
                    theirs.push(r);
                }
            }
            host.running = theirs;
        }
    }
    let known = app.store.hosts().await?;
    let now = trainyard_proto::now_ms();
    let mut views: Vec<HostView> = live.into_iter().map(|h| connected(h, now)).collect();
    for record in known {
        if views.iter().any(|v| v.id == record.id) {
            continue;
        }
        views.push(HostView {
            id: record.id,
            connected: false,
            addr: None,
            slots: record.slots,
            free_slots: 0,
            capacity: record.capacity,
            free: FreeResources::default(),
            adapters: record.adapters,
            agent: record.agent,
            containment: vec![],
            environments: vec![],
            last_seen_ms: record.last_seen_ms,
            running: vec![],
            state: state_word(&record.standing),
            standing: record.standing,
        });
    }
    views.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Json(serde_json::json!({ "hosts": views })))
}

fn connected(h: HostSnapshot, now: i64) -> HostView {
    HostView {
        id: h.id,
        connected: true,
        addr: Some(h.addr),
        slots: h.slots,
        free_slots: h.free_slots,
        capacity: Some(h.capacity),
        free: h.free,
        adapters: h.adapters,
        agent: h.agent,
        containment: h.containment,
        environments: h.environments,
        last_seen_ms: now - h.last_seen_ms_ago as i64,
        running: h.running,
        state: state_word(&h.standing),
        standing: h.standing,
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct DrainQuery {
    /// Stop the attempts it runs now (requeued without using an attempt).
    #[serde(default)]
    pub now: bool,
}

pub async fn drain(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<DrainQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    change(app, caller, id, StandingChange::Drain { now: q.now }).await
}

pub async fn undrain(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    change(app, caller, id, StandingChange::Undrain).await
}

pub async fn unquarantine(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    change(app, caller, id, StandingChange::Unquarantine).await
}

/// The audit log's name of a standing change.
fn action_of(change: &StandingChange) -> (&'static str, Option<serde_json::Value>) {
    match change {
        StandingChange::Drain { now } => ("host.drain", Some(serde_json::json!({ "now": now }))),
        StandingChange::Undrain => ("host.undrain", None),
        StandingChange::Unquarantine => ("host.unquarantine", None),
    }
}

async fn change(
    app: AppState,
    caller: Caller,
    id: String,
    change: StandingChange,
) -> Result<Json<serde_json::Value>, ApiError> {
    caller.may(Action::ManageHosts)?;
    let host =
        HostId::new(id.clone()).map_err(|e| ApiError::not_found(format!("no host {id:?}: {e}")))?;
    let (action, detail) = action_of(&change);
    match app.scheduler.change_standing(host, change).await {
        Ok(standing) => {
            audit::record(&app.store, &caller, action, format!("host {id}"), detail).await;
            Ok(Json(serde_json::json!({
                "id": id,
                "state": state_word(&standing),
                "standing": standing,
            })))
        }
        Err(e @ StandingError::UnknownHost(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e @ StandingError::Unavailable(_)) => Err(ApiError::unavailable(e.to_string())),
    }
}
