//! The API of a standby master (PostgreSQL with several masters). It serves
//! what the database alone answers — tasks, their progress, sweeps, health
//! — marked `trainyard-served-by: standby`, and its own metrics (that it
//! stands by), and sends everything else (mutations, live streams, hosts)
//! to the leader with a
//! `307 Temporary Redirect` to the same path on the leader's API. With no
//! leader, those get a 503 saying so. Its reads are authorised as the
//! leader's are ([`super::auth`]): the tokens are in the database.

use super::auth::Gate;
use super::error::ApiError;
use super::{progress, sweeps, tasks, PlacementView};
use crate::store::{Leader, Store};
use axum::extract::{FromRef, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::watch;

/// The response header that says which kind of master answered.
pub const SERVED_BY: &str = "trainyard-served-by";

#[derive(Clone)]
pub struct StandbyState {
    pub store: Store,
    /// The leader, as this standby last read it.
    pub leader: watch::Receiver<Option<Leader>>,
    /// Who a request acts as.
    pub gate: Gate,
}

impl FromRef<StandbyState> for Gate {
    fn from_ref(s: &StandbyState) -> Gate {
        s.gate.clone()
    }
}

impl FromRef<StandbyState> for Store {
    fn from_ref(s: &StandbyState) -> Store {
        s.store.clone()
    }
}

impl FromRef<StandbyState> for PlacementView {
    fn from_ref(_: &StandbyState) -> PlacementView {
        PlacementView(None)
    }
}

/// The standby's router.
pub fn router(state: StandbyState) -> Router {
    // Other methods on these paths (a submission is a POST to /v1/tasks)
    // go to the leader too.
    Router::new()
        .route("/v1/tasks", get(tasks::list).fallback(to_leader))
        .route("/v1/tasks/{id}", get(tasks::show).fallback(to_leader))
        .route(
            "/v1/tasks/{id}/progress",
            get(progress::history).fallback(to_leader),
        )
        .route("/v1/sweeps", get(sweeps::list).fallback(to_leader))
        .route("/v1/sweeps/{id}", get(sweeps::show).fallback(to_leader))
        .route_layer(axum::middleware::from_fn_with_state(
            state.gate.clone(),
            super::auth::authenticate,
        ))
        .route("/v1/health", get(health))
        .route("/v1/health/live", get(live))
        .route("/v1/health/ready", get(ready))
        .route("/metrics", get(super::metrics::scrape_standby))
        .fallback(to_leader)
        .layer(axum::middleware::map_response(mark_standby))
        .with_state(state)
}

async fn mark_standby(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(SERVED_BY, HeaderValue::from_static("standby"));
    response
}

/// The `leadership` object of `/v1/health`, as a standby sees it.
pub fn leadership_json(role: &str, leader: Option<&Leader>) -> Value {
    json!({
        "role": role,
        "term": leader.map(|l| l.term),
        "leader": leader,
    })
}

async fn health(State(s): State<StandbyState>) -> (StatusCode, Json<Value>) {
    let database = match tokio::time::timeout(super::health::PROBE_TIMEOUT, s.store.ping()).await {
        Ok(Ok(())) => "ok".to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer".to_string(),
    };
    let leader = s.leader.borrow().clone();
    let body = json!({
        "status": "standby",
        "database": database,
        "leadership": leadership_json("standby", leader.as_ref()),
    });
    (StatusCode::OK, Json(body))
}

/// A standby is alive as long as it answers.
async fn live() -> Json<Value> {
    Json(json!({"live": true, "role": "standby"}))
}

/// A standby takes no traffic meant for the leader.
async fn ready(State(s): State<StandbyState>) -> (StatusCode, Json<Value>) {
    let leader = s.leader.borrow().clone();
    let body = json!({
        "ready": false,
        "reason": "this master is a standby",
        "leadership": leadership_json("standby", leader.as_ref()),
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body))
}

/// Everything else goes to the leader's API.
async fn to_leader(State(s): State<StandbyState>, request: Request) -> Response {
    let leader = s.leader.borrow().clone();
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    match redirect_target(leader.as_ref(), &path) {
        Some(location) => match HeaderValue::from_str(&location) {
            Ok(location) => (
                StatusCode::TEMPORARY_REDIRECT,
                [(header::LOCATION, location)],
            )
                .into_response(),
            Err(_) => no_leader(),
        },
        None => no_leader(),
    }
}

fn no_leader() -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "this master is a standby and no master leads right now; retry in a few seconds",
    )
    .into_response()
}

/// Where a request for `path` goes: the same path on the leader's API.
pub fn redirect_target(leader: Option<&Leader>, path: &str) -> Option<String> {
    let base = leader?.api_url.trim_end_matches('/');
    (!base.is_empty()).then(|| format!("{base}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(api_url: &str) -> Leader {
        Leader {
            id: "m2".into(),
            hosts_addr: "10.0.0.2:7700".into(),
            api_url: api_url.into(),
            term: 4,
            since_ms: 0,
        }
    }

    #[test]
    fn requests_go_to_the_same_path_and_query_on_the_leader() {
        let l = leader("https://m2:7701/");
        assert_eq!(
            redirect_target(Some(&l), "/v1/tasks/3/cancel?x=1").as_deref(),
            Some("https://m2:7701/v1/tasks/3/cancel?x=1")
        );
        assert_eq!(redirect_target(None, "/v1/tasks"), None);
        assert_eq!(redirect_target(Some(&leader("")), "/v1/tasks"), None);
    }

    #[test]
    fn the_leadership_object_names_the_role_term_and_leader() {
        let l = leader("http://m2:7701");
        let v = leadership_json("standby", Some(&l));
        assert_eq!(v["role"], "standby");
        assert_eq!(v["term"], 4);
        assert_eq!(v["leader"]["api_url"], "http://m2:7701");
        assert_eq!(leadership_json("standby", None)["leader"], Value::Null);
    }
}
