//! Health endpoints, with the meanings load balancers and Kubernetes probes
//! give them. None waits on the scheduler: they read its last published
//! snapshot, and probe the database and Redis themselves.
//!
//! - `GET /v1/health`: the whole picture (database, Redis, scheduler
//!   counters, recovery costs, tasks by status); 200 when the database and
//!   Redis are reachable and the scheduler runs, else 503 with the same body.
//! - `GET /v1/health/live`: the process and its scheduler loop are alive
//!   (a liveness probe: restart the master when it fails). 200 even while
//!   Redis or the database is down; 503 when the scheduler loop has stopped
//!   or has not finished a turn for `sweep_interval` + [`STALLED_AFTER`].
//! - `GET /v1/health/ready`: the master can serve (a readiness probe: send
//!   it traffic): the database and Redis reachable and the start-up
//!   reconciliation with Redis done. 503 otherwise.

use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};
use std::time::Duration;

/// How long each probe (a database `SELECT 1`, a Redis `PING`) may take
/// before what it probes counts as unreachable. Separate from
/// `timers.redis_timeout`, so a health check answers promptly however
/// patient the scheduler is with Redis.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How much longer than a `sweep_interval` the scheduler may go without
/// finishing a turn before it counts as stuck. A turn waits on Redis (each
/// request bounded by `timers.redis_timeout`) and on the database; only a
/// loop wedged for minutes fails liveness.
pub const STALLED_AFTER: Duration = Duration::from_secs(120);

/// What the probes found.
struct Probes {
    database: Result<(), String>,
    redis: bool,
}

async fn probe(app: &AppState) -> Probes {
    let (database, redis) = tokio::join!(
        tokio::time::timeout(PROBE_TIMEOUT, app.store.ping()),
        ping_redis(app)
    );
    let database = match database {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    };
    Probes { database, redis }
}

async fn ping_redis(app: &AppState) -> bool {
    let ping = async {
        let mut con = app.redis_probe.connection().await?;
        redis::cmd("PING").query_async::<String>(&mut con).await
    };
    matches!(tokio::time::timeout(PROBE_TIMEOUT, ping).await, Ok(Ok(_)))
}

fn status(ok: bool) -> StatusCode {
    if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

fn database_text(database: &Result<(), String>) -> String {
    match database {
        Ok(()) => "ok".into(),
        Err(e) => e.clone(),
    }
}

fn redis_text(redis: bool) -> &'static str {
    if redis {
        "ok"
    } else {
        "unreachable"
    }
}

/// `GET /v1/health`.
pub async fn health(State(app): State<AppState>) -> (StatusCode, Json<Value>) {
    let (probes, leadership) = tokio::join!(probe(&app), leadership(&app));
    let snapshot = app.scheduler.snapshot().ok();
    let overview = snapshot.as_ref().map(|s| s.overview_now());
    let counts = snapshot.as_ref().map(|s| &s.tasks);
    let ok = probes.database.is_ok() && probes.redis && overview.is_some();
    let body = json!({
        "status": if ok { "ok" } else { "degraded" },
        "database": database_text(&probes.database),
        "redis": redis_text(probes.redis),
        "scheduler": overview,
        "tasks": counts,
        "leadership": leadership,
    });
    (status(ok), Json(body))
}

/// Who leads: this master, on PostgreSQL (a standby serves its own
/// health); on SQLite there is one master and no election.
async fn leadership(app: &AppState) -> Value {
    if app.store.backend() != crate::store::Backend::Postgres {
        return super::standby::leadership_json("single", None);
    }
    let leader = tokio::time::timeout(PROBE_TIMEOUT, app.store.leader()).await;
    let leader = leader.ok().and_then(Result::ok).flatten();
    super::standby::leadership_json("leader", leader.as_ref())
}

/// `GET /v1/health/live`.
pub async fn live(State(app): State<AppState>) -> (StatusCode, Json<Value>) {
    let Ok(snapshot) = app.scheduler.snapshot() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"live": false, "reason": "the scheduler loop has stopped"})),
        );
    };
    let age = snapshot.age();
    let limit = app.sweep_interval + STALLED_AFTER;
    let live = age <= limit;
    let mut body = json!({
        "live": live,
        "last_turn_ms_ago": u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
    });
    if !live {
        body["reason"] = json!(format!(
            "the scheduler has not finished a turn for {age:?} (limit {limit:?})"
        ));
    }
    (status(live), Json(body))
}

/// `GET /v1/health/ready`.
pub async fn ready(State(app): State<AppState>) -> (StatusCode, Json<Value>) {
    let probes = probe(&app).await;
    // The reconciliation runs before the API starts; when Redis was down
    // then, the first sweep that reads Redis does its work.
    let reconciled = app
        .scheduler
        .snapshot()
        .ok()
        .map(|s| s.overview.reconcile.is_some() || s.overview.sweeps > 0);
    let ready = probes.database.is_ok() && probes.redis && reconciled == Some(true);
    let body = json!({
        "ready": ready,
        "database": database_text(&probes.database),
        "redis": redis_text(probes.redis),
        "reconciled": reconciled.unwrap_or(false),
        "scheduler": if reconciled.is_some() { "running" } else { "stopped" },
    });
    (status(ready), Json(body))
}
