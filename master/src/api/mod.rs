//! The master's HTTP API (JSON): tasks, hosts, the live event stream and
//! health. Mutating endpoints need the bearer token; bad requests get a 4xx
//! with a JSON error and store nothing.
//!
//! | method | path | |
//! | --- | --- | --- |
//! | POST | `/v1/tasks` | submit one task (token) |
//! | POST | `/v1/tasks/batch` | submit up to 10,000 tasks (token) |
//! | GET | `/v1/tasks?status=&adapter=&limit=&before=` | list, newest first |
//! | GET | `/v1/tasks/{id}` | one task with attempts, progress and result, and why it waits |
//! | POST | `/v1/tasks/{id}/cancel` | cancel (token) |
//! | GET | `/v1/hosts` | hosts and what they run |
//! | GET | `/v1/events[?task=ID]` | server-sent events of task changes |
//! | GET | `/v1/health` | database, Redis and scheduler state |

mod auth;
mod error;
mod events;
mod hosts;
mod tasks;

pub use error::ApiError;
pub use tasks::{SubmitBatch, SubmitTask};

use crate::events::Events;
use crate::scheduler::SchedulerHandle;
use crate::store::Store;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The hosts as the scheduler's latest turn left them, to explain why a
    /// task waits.
    pub placement: tokio::sync::watch::Receiver<Arc<crate::placement::Snapshot>>,
    pub scheduler: SchedulerHandle,
    pub events: Events,
    pub api_token: Arc<str>,
    pub default_max_attempts: u32,
}

/// The router with every endpoint.
pub fn router(state: AppState) -> Router {
    let mutating = Router::new()
        .route(
            "/v1/tasks",
            post(tasks::submit).layer(DefaultBodyLimit::max(2 << 20)),
        )
        .route(
            "/v1/tasks/batch",
            post(tasks::submit_batch).layer(DefaultBodyLimit::max(256 << 20)),
        )
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .route("/v1/tasks", get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::show))
        .route("/v1/hosts", get(hosts::list))
        .route("/v1/events", get(events::stream))
        .route("/v1/health", get(health))
        .merge(mutating)
        .fallback(|| async {
            ApiError::not_found(
                "no such endpoint; see /v1/health, /v1/tasks, /v1/hosts, /v1/events",
            )
        })
        .with_state(state)
}

async fn health(State(app): State<AppState>) -> Json<serde_json::Value> {
    let counts = app.store.status_counts().await;
    let overview = app.scheduler.overview().await.ok();
    let database_ok = counts.is_ok();
    let redis_ok = overview.as_ref().is_some_and(|o| o.redis_ok);
    let status = if database_ok && redis_ok && overview.is_some() {
        "ok"
    } else {
        "degraded"
    };
    Json(serde_json::json!({
        "status": status,
        "database": match &counts { Ok(_) => "ok".to_string(), Err(e) => e.to_string() },
        "redis": if redis_ok { "ok" } else { "unreachable" },
        "scheduler": overview,
        "tasks": counts.ok(),
    }))
}
