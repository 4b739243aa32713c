//! Teams, tokens and sessions on the API.
//!
//! | method | path | |
//! | --- | --- | --- |
//! | GET | `/v1/whoami` | the caller: name, role, team |
//! | GET | `/v1/teams` | the teams (a team's principal: its own) |
//! | POST | `/v1/teams` | `{"name"}`: create a team (admin) |
//! | GET | `/v1/tokens` | every issued token, never the token itself (admin) |
//! | POST | `/v1/tokens` | `{"name", "role", "team", "expires_in"}`: issue one; the token is in this answer only (admin) |
//! | POST | `/v1/tokens/{id}/revoke` | revoke it, from the next request on (admin) |
//! | POST | `/v1/session` | `{"token"}`: the dashboard's session cookie, for reads |
//! | DELETE | `/v1/session` | clear it |

use super::audit;
use super::auth::{Caller, Gate, SESSION_COOKIE};
use super::error::{ApiError, Body};
use super::AppState;
use crate::access::{check_team_name, check_token_role, issue_token, Action, Role};
use crate::store::{NewToken, TokenError};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// How long a token lives when its request names no expiry.
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Longest a session cookie lasts (less when its token expires sooner).
const SESSION_MAX_AGE: Duration = Duration::from_secs(12 * 3600);

pub async fn whoami(caller: Caller) -> Json<Value> {
    Json(json!({
        "name": caller.principal.name,
        "role": caller.principal.role,
        "team": caller.principal.team,
        "token_id": caller.principal.token_id,
    }))
}

pub async fn teams(State(app): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.may(Action::Read)?;
    let teams: Vec<_> = app
        .store
        .teams()
        .await?
        .into_iter()
        .filter(|t| caller.principal.sees(&t.name))
        .collect();
    Ok(Json(json!({ "teams": teams })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTeam {
    pub name: String,
}

pub async fn create_team(
    State(app): State<AppState>,
    caller: Caller,
    Body(team): Body<NewTeam>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.may(Action::ManageAccess)?;
    check_team_name(&team.name).map_err(ApiError::unprocessable)?;
    if !app
        .store
        .create_team(&team.name, trainyard_proto::now_ms())
        .await?
    {
        return Err(ApiError::conflict(format!(
            "team {} already exists",
            team.name
        )));
    }
    audit::record(
        &app.store,
        &caller,
        "team.create",
        format!("team {}", team.name),
        None,
    )
    .await;
    Ok((StatusCode::CREATED, Json(json!({ "name": team.name }))))
}

pub async fn tokens(State(app): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    caller.may(Action::ManageAccess)?;
    Ok(Json(json!({ "tokens": app.store.tokens().await? })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// Who or what holds it (`alice`, `ci-red`): the audit log's name for it.
    pub name: String,
    pub role: String,
    #[serde(default)]
    pub team: Option<String>,
    /// `30d`, `12h`, ... or `never`; 90 days when omitted.
    #[serde(default)]
    pub expires_in: Option<String>,
}

/// When a token asked to live `expires_in` from `now_ms` expires.
fn expiry(expires_in: Option<&str>, now_ms: i64) -> Result<Option<i64>, String> {
    let lifetime = match expires_in.map(str::trim) {
        None => DEFAULT_TOKEN_LIFETIME,
        Some("never") => return Ok(None),
        Some(text) => humantime::parse_duration(text).map_err(|e| {
            format!("\"expires_in\": {text:?} is not a duration such as 30d or 12h, or never: {e}")
        })?,
    };
    if lifetime.is_zero() {
        return Err("\"expires_in\" must be longer than zero".into());
    }
    let ms = i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX);
    Ok(Some(now_ms.saturating_add(ms)))
}

/// Checks a token request; its role and expiry.
fn check_request(req: &TokenRequest, now_ms: i64) -> Result<(Role, Option<i64>), String> {
    let name = req.name.trim();
    if name.is_empty() || name.len() > 128 {
        return Err("\"name\" must be 1 to 128 bytes".into());
    }
    let role = Role::parse(&req.role).ok_or_else(|| {
        let all: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
        format!("unknown role {:?}; use one of {}", req.role, all.join(", "))
    })?;
    check_token_role(role, req.team.as_deref())?;
    Ok((role, expiry(req.expires_in.as_deref(), now_ms)?))
}

pub async fn create_token(
    State(app): State<AppState>,
    caller: Caller,
    Body(req): Body<TokenRequest>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.may(Action::ManageAccess)?;
    let now = trainyard_proto::now_ms();
    let (role, expires_at_ms) = check_request(&req, now).map_err(ApiError::unprocessable)?;
    let issued = issue_token();
    let new = NewToken {
        name: req.name.trim(),
        role,
        team: req.team.as_deref(),
        digest: &issued.digest,
        created_by: &caller.principal.name,
        expires_at_ms,
    };
    let record = match app.store.create_token(&new, now).await {
        Ok(record) => record,
        Err(e @ TokenError::NoSuchTeam(_)) => return Err(ApiError::unprocessable(e.to_string())),
        Err(TokenError::Store(e)) => return Err(e.into()),
    };
    let detail = json!({ "name": record.name, "role": role, "team": record.team, "expires_at_ms": expires_at_ms });
    audit::record(
        &app.store,
        &caller,
        "token.create",
        format!("token {}", record.id),
        Some(detail),
    )
    .await;
    let mut body = serde_json::to_value(&record).unwrap_or_default();
    body["token"] = Value::String(issued.secret);
    Ok((StatusCode::CREATED, Json(body)))
}

pub async fn revoke_token(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<i64>,
) -> Result<Json<Value>, ApiError> {
    caller.may(Action::ManageAccess)?;
    let Some(record) = app
        .store
        .revoke_token(id, trainyard_proto::now_ms())
        .await?
    else {
        return Err(ApiError::not_found(format!("no token {id}")));
    };
    audit::record(
        &app.store,
        &caller,
        "token.revoke",
        format!("token {id}"),
        Some(json!({ "name": record.name })),
    )
    .await;
    Ok(Json(serde_json::to_value(&record).unwrap_or_default()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRequest {
    pub token: String,
}

/// The `Set-Cookie` value of a session holding `token` for `max_age`.
fn session_cookie(token: &str, max_age: Duration, https: bool) -> String {
    format!(
        "{SESSION_COOKIE}={token}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        max_age.as_secs(),
        if https { "; Secure" } else { "" }
    )
}

/// Checks the token and hands it back as an HTTP-only cookie, which the
/// browser sends with the dashboard's reads (the event stream included,
/// which cannot carry a header).
pub async fn open_session(
    State(gate): State<Gate>,
    Body(req): Body<SessionRequest>,
) -> Result<Response, ApiError> {
    let token = req.token.trim();
    if token.is_empty() || !token.is_ascii() || token.contains([';', ' ', ',']) {
        return Err(ApiError::unauthorized("invalid API token"));
    }
    let principal = gate.resolve(token).await?;
    let cookie = session_cookie(token, SESSION_MAX_AGE, gate.https);
    let value =
        HeaderValue::from_str(&cookie).map_err(|_| ApiError::unauthorized("invalid API token"))?;
    let body = json!({ "name": principal.name, "role": principal.role, "team": principal.team });
    Ok(([(header::SET_COOKIE, value)], Json(body)).into_response())
}

pub async fn close_session(State(gate): State<Gate>) -> Response {
    let cookie = session_cookie("", Duration::ZERO, gate.https);
    match HeaderValue::from_str(&cookie) {
        Ok(value) => ([(header::SET_COOKIE, value)], StatusCode::NO_CONTENT).into_response(),
        Err(_) => StatusCode::NO_CONTENT.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(role: &str, team: Option<&str>, expires_in: Option<&str>) -> TokenRequest {
        TokenRequest {
            name: "ci".into(),
            role: role.into(),
            team: team.map(str::to_string),
            expires_in: expires_in.map(str::to_string),
        }
    }

    #[test]
    fn a_token_request_gets_an_expiry_unless_it_asks_for_none() {
        let now = 1_000;
        let (role, at) = check_request(&request("member", Some("red"), None), now).unwrap();
        assert_eq!(role, Role::Member);
        assert_eq!(at, Some(now + DEFAULT_TOKEN_LIFETIME.as_millis() as i64));
        let (_, at) = check_request(&request("admin", None, Some("12h")), now).unwrap();
        assert_eq!(at, Some(now + 12 * 3600 * 1000));
        let (_, at) = check_request(&request("operator", None, Some("never")), now).unwrap();
        assert_eq!(at, None);
    }

    #[test]
    fn bad_token_requests_say_what_is_wrong() {
        let err = |r| check_request(&r, 0).unwrap_err();
        assert!(err(request("root", None, None)).contains("unknown role \"root\""));
        assert!(err(request("member", None, None)).contains("needs a team"));
        assert!(err(request("admin", Some("red"), None)).contains("without a team"));
        assert!(err(request("viewer", Some("red"), Some("soon"))).contains("expires_in"));
        assert!(err(request("viewer", Some("red"), Some("0s"))).contains("longer than zero"));
    }

    #[test]
    fn the_session_cookie_is_out_of_scripts_and_other_sites_reach() {
        let c = session_cookie("tyt_x", Duration::from_secs(60), true);
        assert_eq!(
            c,
            "trainyard_session=tyt_x; Path=/; Max-Age=60; HttpOnly; SameSite=Strict; Secure"
        );
        assert!(!session_cookie("t", Duration::ZERO, false).contains("Secure"));
    }
}
