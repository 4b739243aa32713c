//! `GET /v1/hosts`: every host the master has seen, connected ones with what
//! they run right now.

use super::error::ApiError;
use super::AppState;
use crate::scheduler::{FreeResources, HostSnapshot, RunningSnapshot};
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use trainyard_proto::messages::{AdapterInfo, PythonEnvironment};
use trainyard_proto::resources::HostCapacity;

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
}

pub async fn list(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let live = app.scheduler.hosts().await?;
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
    }
}
