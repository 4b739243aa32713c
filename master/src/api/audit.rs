//! The audit log on the API: every change made through it is recorded here
//! after it took effect — who (the token's name, id, role and team), when,
//! what, on what, from which address — and `GET /v1/audit?limit=&before=`
//! pages through it, newest first (admins and operators). The API has no
//! endpoint that edits or deletes an entry.
//!
//! An entry is written after its change, outside the change's transaction:
//! a master that dies between the two leaves a change without its entry
//! (logged at error level when the write itself fails), never an entry
//! without its change.

use super::auth::Caller;
use super::ApiError;
use crate::access::Action;
use crate::store::{NewAuditEntry, Store};
use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

/// Records a change `caller` made.
pub(super) async fn record(
    store: &Store,
    caller: &Caller,
    action: &str,
    target: String,
    detail: Option<Value>,
) {
    let entry = NewAuditEntry {
        principal: &caller.principal,
        action,
        target,
        detail,
        source: &caller.source,
    };
    if let Err(e) = store.audit(&entry, trainyard_proto::now_ms()).await {
        tracing::error!(
            error = %e,
            action,
            target = %entry.target,
            principal = %caller.principal.name,
            "a change took effect but its audit entry could not be written"
        );
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    pub limit: Option<u32>,
    /// Page cursor: entries with a smaller id (the last id of the page before).
    pub before: Option<i64>,
}

pub async fn list(
    State(store): State<Store>,
    caller: Caller,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.may(Action::ReadAudit)?;
    let entries = store
        .audit_entries(q.limit.unwrap_or(100), q.before)
        .await?;
    Ok(Json(json!({ "entries": entries })))
}
