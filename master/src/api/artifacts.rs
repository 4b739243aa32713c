//! Artifacts on the API: what a task's attempts left, downloads, and the
//! hosts' uploads.
//!
//! | method | path | |
//! | --- | --- | --- |
//! | GET | `/v1/tasks/{id}/artifacts` | `{"artifacts": [...]}`, oldest first |
//! | GET | `/v1/tasks/{id}/artifacts/{artifact}` | its bytes, streamed; one `Range` honoured (206) |
//! | PUT | `/v1/tasks/{id}/attempts/{attempt}/artifacts/{kind}/{*name}` | a host streams an object into the embedded store (signed) |
//! | POST | `/v1/tasks/{id}/attempts/{attempt}/artifacts` | a host records an object it wrote into a shared directory (signed) |
//!
//! Hosts sign with the cluster secret (`auth::ClusterSecret::sign_request`),
//! over a connection of their own: a large upload never queues behind, or
//! in front of, the host channel's heartbeats and lease renewals, and TCP's
//! own flow control paces it (the store reads no faster than it writes).
//! An upload from an attempt that is not its task's live one is refused
//! before its bytes are read, and again, atomically, when it is recorded.

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::access::Action;
use crate::artifacts::{range_asked, Artifacts, RangeAsk};
use crate::store::{Artifact, NewArtifact};
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use trainyard_artifacts::{check_name, object_key, ArtifactKind, PutError};
use trainyard_proto::{now_ms, TaskId};

/// The response header carrying an artifact's SHA-256 (lower-case hex).
pub const SHA256_HEADER: &str = "x-trainyard-sha256";

fn store_of(app: &AppState) -> Result<&Arc<Artifacts>, ApiError> {
    app.artifacts.as_ref().ok_or_else(|| {
        ApiError::not_found("this master keeps no artifacts (it has no artifact store)")
    })
}

/// `GET /v1/tasks/{id}/artifacts`.
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    Path(task): Path<TaskId>,
) -> Result<Json<serde_json::Value>, ApiError> {
    caller.on_task(&app.store, Action::Read, task).await?;
    let artifacts = app.store.artifacts(task).await?;
    Ok(Json(json!({ "artifacts": artifacts })))
}

/// `GET /v1/tasks/{id}/artifacts/{artifact}`.
/// Read by a principal (its token) or by a host resuming from a checkpoint
/// (signed with the cluster secret).
pub async fn download(
    State(app): State<AppState>,
    Path((task, id)): Path<(TaskId, i64)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let artifacts = store_of(&app)?;
    match super::auth::principal_of(&app.gate, &headers, true).await? {
        Some(principal) => {
            let caller = Caller {
                principal,
                source: String::new(),
            };
            caller.on_task(&app.store, Action::Read, task).await?;
        }
        None if app.gate.open_reads && !headers.contains_key(header::AUTHORIZATION) => {}
        None => {
            signed_by(artifacts, &Method::GET, uri.path(), &headers)?;
        }
    }
    let Some(artifact) = app.store.artifact(task, id).await? else {
        return Err(ApiError::not_found(format!(
            "task {task} has no artifact {id}"
        )));
    };
    let asked = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, range) = match range_asked(asked, artifact.size) {
        RangeAsk::Whole => (StatusCode::OK, None),
        RangeAsk::Part(range) => (StatusCode::PARTIAL_CONTENT, Some(range)),
        RangeAsk::Unsatisfiable => {
            let mut refused = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!("artifact {id} holds {} bytes", artifact.size),
            )
            .into_response();
            refused.headers_mut().insert(
                header::CONTENT_RANGE,
                header_value(&format!("bytes */{}", artifact.size)),
            );
            return Ok(refused);
        }
    };
    let read = artifacts
        .store
        .read(&artifact.location, range.clone())
        .await
        .map_err(|e| {
            tracing::error!(task, artifact = id, location = %artifact.location, error = %e, "a recorded artifact cannot be read");
            ApiError::unavailable(format!("artifact {id} cannot be read from the store: {e}"))
        })?;
    let mut response = Response::new(Body::from_stream(read.bytes));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::CONTENT_LENGTH,
        header_value(&(read.range.end - read.range.start).to_string()),
    );
    h.insert(SHA256_HEADER, header_value(&artifact.sha256));
    h.insert(
        header::ETAG,
        header_value(&format!("\"{}\"", artifact.sha256)),
    );
    let file = artifact.name.rsplit('/').next().unwrap_or("artifact");
    let file: String = file
        .chars()
        .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
        .collect();
    h.insert(
        header::CONTENT_DISPOSITION,
        header_value(&format!("attachment; filename=\"{file}\"")),
    );
    if range.is_some() {
        h.insert(
            header::CONTENT_RANGE,
            header_value(&format!(
                "bytes {}-{}/{}",
                read.range.start,
                read.range.end - 1,
                read.size
            )),
        );
    }
    Ok(response)
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// The host that signed the request, or the refusal.
fn signed_by(
    artifacts: &Artifacts,
    method: &Method,
    request_path: &str,
    headers: &HeaderMap,
) -> Result<String, ApiError> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    artifacts
        .secret
        .verify_request(authorization, method.as_str(), request_path, now_ms())
        .map_err(|e| {
            tracing::warn!(path = request_path, error = %e, "artifact request refused");
            ApiError::new(StatusCode::UNAUTHORIZED, e.to_string())
        })
}

/// The kind and name of an upload, checked.
fn kind_and_name(kind: &str, name: &str) -> Result<ArtifactKind, ApiError> {
    let kind = ArtifactKind::parse(kind).ok_or_else(|| {
        ApiError::bad_request(format!(
            "unknown artifact kind {kind:?}: checkpoint or output"
        ))
    })?;
    check_name(name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(kind)
}

/// Refuses an upload of an attempt that is not its task's live one.
async fn require_live(app: &AppState, task: TaskId, attempt: u32) -> Result<(), ApiError> {
    match app.store.live_attempt(task).await? {
        Some(live) if live == attempt => Ok(()),
        _ => Err(not_live(task, attempt)),
    }
}

fn not_live(task: TaskId, attempt: u32) -> ApiError {
    ApiError::conflict(format!(
        "attempt {attempt} of task {task} is not the task's live attempt (it was given up, or the task ended): nothing was stored"
    ))
}

/// Records a complete object; deletes it again when its attempt is no
/// longer live, so no object is left that no row names.
async fn record(
    app: &AppState,
    artifacts: &Artifacts,
    new: NewArtifact,
) -> Result<Response, ApiError> {
    let at = now_ms();
    match app.store.record_artifact(&new, at).await {
        Ok(Some(id)) => {
            tracing::info!(task = new.task, attempt = new.attempt, kind = %new.kind, name = %new.name, size = new.size, "artifact stored");
            let artifact = Artifact {
                id,
                task: new.task,
                attempt: new.attempt,
                kind: new.kind,
                name: new.name,
                size: new.size,
                sha256: new.sha256,
                location: new.location,
                created_at_ms: at,
            };
            Ok((StatusCode::CREATED, Json(artifact)).into_response())
        }
        refused => {
            if let Err(e) = artifacts.store.delete(&new.location).await {
                tracing::warn!(location = %new.location, error = %e, "could not delete an object no row names");
            }
            refused?;
            Err(not_live(new.task, new.attempt))
        }
    }
}

/// `PUT /v1/tasks/{id}/attempts/{attempt}/artifacts/{kind}/{*name}`.
pub async fn upload(
    State(app): State<AppState>,
    Path((task, attempt, kind, name)): Path<(TaskId, u32, String, String)>,
    request: Request,
) -> Result<Response, ApiError> {
    let artifacts = store_of(&app)?.clone();
    let host = signed_by(
        &artifacts,
        request.method(),
        request.uri().path(),
        request.headers(),
    )?;
    let kind = kind_and_name(&kind, &name)?;
    require_live(&app, task, attempt).await?;
    let limit = artifacts.max_object_bytes;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    let location = object_key(task, attempt, kind, rand::random(), &name);
    tracing::info!(task, attempt, %host, %kind, %name, "receiving an artifact");
    let body = request.into_body().into_data_stream();
    let body = crate::failpoints::stall_uploads(body.boxed());
    let written = artifacts
        .store
        .put_stream(&location, body, limit)
        .await
        .map_err(|e| match e {
            PutError::TooLarge { limit } => too_large(limit),
            PutError::Source(why) => ApiError::bad_request(format!("the upload was cut short: {why}")),
            other => {
                tracing::error!(task, attempt, %name, error = %other, "the artifact store refused an upload");
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, other.to_string())
            }
        })?;
    let new = NewArtifact {
        task,
        attempt,
        kind,
        name,
        size: written.size,
        sha256: written.sha256,
        location,
    };
    record(&app, &artifacts, new).await
}

fn too_large(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the object is larger than artifacts.max_object_bytes ({limit} bytes): nothing was stored"),
    )
}

/// An object a host wrote into a shared directory itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Written {
    pub kind: String,
    pub name: String,
    pub location: String,
    pub size: u64,
    pub sha256: String,
}

/// `POST /v1/tasks/{id}/attempts/{attempt}/artifacts`.
pub async fn register(
    State(app): State<AppState>,
    Path((task, attempt)): Path<(TaskId, u32)>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    Json(written): Json<Written>,
) -> Result<Response, ApiError> {
    let artifacts = store_of(&app)?.clone();
    signed_by(&artifacts, &method, uri.path(), &headers)?;
    let kind = kind_and_name(&written.kind, &written.name)?;
    let prefix = format!("tasks/{task}/{attempt}/{kind}/");
    if !written.location.starts_with(&prefix)
        || written
            .location
            .split('/')
            .any(|p| p == ".." || p.is_empty())
    {
        return Err(ApiError::bad_request(format!(
            "an object of attempt {attempt} of task {task} lives under {prefix}"
        )));
    }
    let sha_ok = written.sha256.len() == 64
        && written
            .sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !sha_ok {
        return Err(ApiError::bad_request(
            "sha256 must be 64 lower-case hex digits",
        ));
    }
    require_live(&app, task, attempt).await?;
    match artifacts.store.size_of(&written.location).await {
        Ok(Some(size)) if size == written.size => {}
        Ok(found) => {
            return Err(ApiError::unprocessable(format!(
                "the store holds {} at {}, not the {} bytes announced",
                found.map_or("nothing".to_string(), |s| format!("{s} bytes")),
                written.location,
                written.size
            )))
        }
        Err(e) => {
            return Err(ApiError::unavailable(format!(
                "cannot read the artifact store: {e}"
            )))
        }
    }
    let new = NewArtifact {
        task,
        attempt,
        kind,
        name: written.name,
        size: written.size,
        sha256: written.sha256,
        location: written.location,
    };
    record(&app, &artifacts, new).await
}
