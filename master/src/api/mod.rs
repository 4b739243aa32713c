//! The master's HTTP API (JSON): tasks, hosts, the live event stream and
//! health, and the web dashboard that reads them. Every endpoint under
//! `/v1/` but health, the dashboard's session and hosts' signed uploads
//! needs a token ([`auth`]), and answers only what its principal may see
//! ([`crate::access`]): another team's task or sweep is 404. Every change is
//! recorded in the audit log ([`audit`]). Bad requests get a 4xx with a JSON
//! error and store nothing. Served over HTTPS when the master has a
//! certificate ([`tls`]).
//!
//! | method | path | |
//! | --- | --- | --- |
//! | POST | `/v1/tasks` | submit one task (member, admin) |
//! | POST | `/v1/tasks/batch` | submit up to 10,000 tasks (member, admin) |
//! | GET | `/v1/tasks?status=&adapter=&name=&team=&limit=&before=` | list, newest first |
//! | GET | `/v1/tasks/{id}` | one task with attempts, progress and result, and why it waits |
//! | GET | `/v1/tasks/{id}/progress?after=&limit=` | its stored progress history, oldest first |
//! | GET | `/v1/tasks/{id}/logs?attempt=&tail=&after=&follow=` | its captured trainer and adapter lines, oldest first; `follow=true` streams them (server-sent events) until the task ends |
//! | GET | `/v1/tasks/{id}/artifacts` | its checkpoints and outputs ([`artifacts`]) |
//! | GET | `/v1/tasks/{id}/artifacts/{artifact}` | one artifact's bytes, streamed (`Range` honoured) |
//! | PUT, POST | `/v1/tasks/{id}/attempts/{attempt}/artifacts...` | hosts' uploads (signed with the cluster secret) |
//! | POST | `/v1/tasks/{id}/cancel` | cancel (token) |
//! | POST | `/v1/sweeps` | create a sweep from its spec, with its trials (token) |
//! | GET | `/v1/sweeps?limit=&before=` | list sweeps, newest first |
//! | GET | `/v1/sweeps/{id}` | one sweep: spec, ranking over seeds, trials |
//! | POST | `/v1/sweeps/{id}/cancel` | cancel a sweep's unfinished trials (token) |
//! | GET | `/v1/hosts` | hosts and what they run |
//! | GET | `/v1/events[?task=ID]` | server-sent events of task changes |
//! | GET | `/v1/activity?minutes=` | attempts ended in each of the last minutes, by outcome |
//! | GET | `/v1/audit?limit=&before=` | the audit log, newest first (admin, operator) |
//! | | `/v1/whoami`, `/v1/teams`, `/v1/tokens`, `/v1/session` | teams, tokens and the dashboard's session ([`access`]) |
//! | GET | `/v1/health` | database, Redis and scheduler state; 503 when degraded |
//! | GET | `/v1/health/live` | liveness: the scheduler loop runs |
//! | GET | `/v1/health/ready` | readiness: database and Redis reachable, reconciled |
//! | GET | `/metrics` | Prometheus metrics (text format) |
//! | GET | `/` | the web dashboard ([`crate::dashboard`]); its files under `/assets/` |

mod access;
mod activity;
pub mod artifacts;
mod audit;
pub mod auth;
mod error;
mod events;
pub mod health;
mod hosts;
mod logs;
pub mod metrics;
mod progress;
pub mod standby;
mod sweeps;
mod tasks;
pub mod tls;

pub use error::ApiError;
pub use tasks::{SubmitBatch, SubmitTask};

use crate::events::Events;
use crate::scheduler::SchedulerHandle;
use crate::store::Store;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;
use std::time::Duration;
use trainyard_proto::redis_link::RedisLink;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The hosts as the scheduler's latest turn left them, to explain why a
    /// task waits.
    pub placement: tokio::sync::watch::Receiver<Arc<crate::placement::Snapshot>>,
    pub scheduler: SchedulerHandle,
    pub events: Events,
    /// The log recorder: followers hear of new lines through it.
    pub logs: crate::logs::LogFeed,
    /// Who a request acts as.
    pub gate: auth::Gate,
    /// Which adapters each team may run (`master.team_adapters`).
    pub adapter_rules: Arc<crate::access::AdapterRules>,
    pub default_max_attempts: u32,
    /// The health probes' own Redis connection: a probe never queues behind
    /// the scheduler's requests.
    pub redis_probe: Arc<RedisLink>,
    /// How often the scheduler finishes a turn at the least (liveness).
    pub sweep_interval: Duration,
    /// The artifact store, when the master keeps one.
    pub artifacts: Option<Arc<crate::artifacts::Artifacts>>,
}

impl axum::extract::FromRef<AppState> for auth::Gate {
    fn from_ref(app: &AppState) -> auth::Gate {
        app.gate.clone()
    }
}

impl axum::extract::FromRef<AppState> for Store {
    fn from_ref(app: &AppState) -> Store {
        app.store.clone()
    }
}

/// The hosts as the scheduler's latest turn left them, where this master
/// schedules (a standby does not).
#[derive(Clone)]
pub struct PlacementView(pub Option<tokio::sync::watch::Receiver<Arc<crate::placement::Snapshot>>>);

impl axum::extract::FromRef<AppState> for PlacementView {
    fn from_ref(app: &AppState) -> PlacementView {
        PlacementView(Some(app.placement.clone()))
    }
}

async fn mark_leader(mut response: axum::response::Response) -> axum::response::Response {
    response.headers_mut().insert(
        standby::SERVED_BY,
        axum::http::HeaderValue::from_static("leader"),
    );
    response
}

/// The router with every endpoint.
pub fn router(state: AppState) -> Router {
    let gated = Router::new()
        .route(
            "/v1/tasks",
            get(tasks::list)
                .post(tasks::submit)
                .layer(DefaultBodyLimit::max(2 << 20)),
        )
        .route(
            "/v1/tasks/batch",
            post(tasks::submit_batch).layer(DefaultBodyLimit::max(256 << 20)),
        )
        .route("/v1/tasks/{id}", get(tasks::show))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route("/v1/tasks/{id}/progress", get(progress::history))
        .route("/v1/tasks/{id}/logs", get(logs::read))
        .route("/v1/tasks/{id}/artifacts", get(artifacts::list))
        .route(
            "/v1/sweeps",
            get(sweeps::list)
                .post(sweeps::create)
                .layer(DefaultBodyLimit::max(2 << 20)),
        )
        .route("/v1/sweeps/{id}", get(sweeps::show))
        .route("/v1/sweeps/{id}/cancel", post(sweeps::cancel))
        .route("/v1/hosts", get(hosts::list))
        .route("/v1/hosts/{id}/drain", post(hosts::drain))
        .route("/v1/hosts/{id}/undrain", post(hosts::undrain))
        .route("/v1/hosts/{id}/unquarantine", post(hosts::unquarantine))
        .route("/v1/events", get(events::stream))
        .route("/v1/activity", get(activity::recent))
        .route("/v1/audit", get(audit::list))
        .route("/v1/whoami", get(access::whoami))
        .route("/v1/teams", get(access::teams).post(access::create_team))
        .route("/v1/tokens", get(access::tokens).post(access::create_token))
        .route("/v1/tokens/{id}/revoke", post(access::revoke_token))
        .route_layer(axum::middleware::from_fn_with_state(
            state.gate.clone(),
            auth::authenticate,
        ));
    Router::new()
        .route(
            "/v1/tasks/{id}/attempts/{attempt}/artifacts/{kind}/{*name}",
            axum::routing::put(artifacts::upload).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/tasks/{id}/attempts/{attempt}/artifacts",
            post(artifacts::register),
        )
        // Its own authentication: a principal's token or a host's signature.
        .route(
            "/v1/tasks/{id}/artifacts/{artifact}",
            get(artifacts::download),
        )
        .route(
            "/v1/session",
            post(access::open_session).delete(access::close_session),
        )
        .route("/v1/health", get(health::health))
        .route("/v1/health/live", get(health::live))
        .route("/v1/health/ready", get(health::ready))
        .route("/metrics", get(metrics::scrape))
        .merge(crate::dashboard::router())
        .merge(gated)
        .layer(axum::middleware::map_response(mark_leader))
        .fallback(|| async {
            ApiError::not_found(
                "no such endpoint; see / (the dashboard), /v1/health, /v1/tasks, /v1/sweeps, /v1/hosts, /v1/events, /metrics",
            )
        })
        .with_state(state)
}
