//! `GET /v1/tasks/{id}/progress?after=&limit=`: a task's stored progress
//! history ([`crate::history`]), oldest first, from after the point id
//! `after` (0, the default, from the first). Answers `next`, the cursor for
//! the following page (the last point's id, or `after` when there was none).

use super::auth::Caller;
use super::ApiError;
use crate::access::Action;
use crate::store::{Store, MAX_POINTS_READ};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use trainyard_proto::TaskId;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressQuery {
    pub after: Option<i64>,
    pub limit: Option<u32>,
}

pub async fn history(
    State(store): State<Store>,
    caller: Caller,
    Path(id): Path<TaskId>,
    Query(q): Query<ProgressQuery>,
) -> Result<Json<Value>, ApiError> {
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::bad_request(
            "after must be a point id (0 or more)",
        ));
    }
    let limit = match q.limit {
        None => MAX_POINTS_READ,
        Some(n @ 1..=MAX_POINTS_READ) => n,
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "limit {n} is out of range 1..={MAX_POINTS_READ}"
            )))
        }
    };
    caller.on_task(&store, Action::Read, id).await?;
    let points = store.points(id, after, limit).await?;
    let next = points.last().map_or(after, |p| p.id);
    Ok(Json(json!({ "task": id, "points": points, "next": next })))
}
