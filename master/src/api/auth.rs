//! Authentication at the API's edge: who a request acts as ([`Caller`]).
//! Every endpoint under `/v1/` but health, the dashboard login and hosts'
//! signed uploads goes through [`authenticate`]; the handlers then ask
//! [`crate::access`] whether the caller may do what it asks, on the object
//! it names.
//!
//! A request presents `Authorization: Bearer <token>`: the cluster's own
//! token (`api.token`, an admin, compared in constant time) or one issued
//! with `trainyard token create` (looked up by its SHA-256 on every request,
//! so a revocation holds from the next request on). A read (GET) may
//! instead carry the dashboard's session cookie, which holds the same token;
//! it never authorises a change, so a page on another site that makes the
//! browser send it can change nothing (and `SameSite=Strict` keeps it from
//! being sent at all). Without either, a read is let through as an
//! anonymous reader of every team only when `api.open_reads` is on.

use super::error::ApiError;
use crate::access::{token_digest, Action, Principal, Refusal};
use crate::store::Store;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;
use std::sync::Arc;
use trainyard_proto::TaskId;

/// The dashboard's session cookie: the token, out of scripts' reach.
pub const SESSION_COOKIE: &str = "trainyard_session";

/// What authentication needs; shared by the leader's and a standby's API.
#[derive(Clone)]
pub struct Gate {
    pub store: Store,
    /// The cluster's own token (`api.token`): an admin.
    pub legacy_token: Arc<str>,
    /// Reads without a token see every team's work (`api.open_reads`).
    pub open_reads: bool,
    /// The API is served over HTTPS: the session cookie is `Secure`.
    pub https: bool,
}

/// Who a request acts as, and from where (for the audit log).
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Principal,
    /// The client's address as this master saw it.
    pub source: String,
}

impl Caller {
    /// Whether it may do `action` at all: 403 saying why not.
    pub fn may(&self, action: Action) -> Result<(), ApiError> {
        self.principal.may(action).map_err(ApiError::forbidden)
    }

    /// Whether it may do `action` on an object of `team`: another team's
    /// object is answered exactly as a missing one (`missing`, 404).
    pub fn may_on(
        &self,
        action: Action,
        team: &str,
        missing: impl FnOnce() -> String,
    ) -> Result<(), ApiError> {
        match self.principal.may_on(action, team) {
            Ok(()) => Ok(()),
            Err(Refusal::NotFound) => Err(ApiError::not_found(missing())),
            Err(Refusal::Forbidden(why)) => Err(ApiError::forbidden(why)),
        }
    }
}

impl Caller {
    /// Whether `id` is a task it may do `action` on: a missing task and
    /// another team's are the same 404.
    pub async fn on_task(&self, store: &Store, action: Action, id: TaskId) -> Result<(), ApiError> {
        let missing = || format!("no task {id}");
        match store.task_team(id).await? {
            Some(team) => self.may_on(action, &team, missing),
            None => Err(ApiError::not_found(missing())),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "this endpoint was reached without authentication (a master bug)",
            )
        })
    }
}

/// Where a request's token was found.
#[derive(Debug, PartialEq, Eq)]
enum Presented<'a> {
    Bearer(&'a str),
    Cookie(&'a str),
}

/// The token a request presents: the bearer header first, then (reads
/// only) the session cookie.
fn presented(headers: &HeaderMap, read: bool) -> Option<Presented<'_>> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| Presented::Bearer(t.trim()));
    bearer.or_else(|| {
        read.then(|| session_cookie(headers))
            .flatten()
            .map(Presented::Cookie)
    })
}

/// The session cookie's value, when the request carries one.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty())
}

impl Gate {
    /// The principal a token stands for; 401 with the reason when none.
    pub async fn resolve(&self, token: &str) -> Result<Principal, ApiError> {
        if crate::access::is_legacy_token(token, &self.legacy_token) {
            return Ok(Principal::legacy_admin());
        }
        match self.store.token_by_digest(&token_digest(token)).await? {
            Some(record) => record
                .principal(trainyard_proto::now_ms())
                .map_err(ApiError::unauthorized),
            None => Err(ApiError::unauthorized("invalid API token")),
        }
    }
}

/// The principal of a request that presents a token (bearer, or the
/// session cookie on a read); `None` when it presents none.
pub async fn principal_of(
    gate: &Gate,
    headers: &HeaderMap,
    read: bool,
) -> Result<Option<Principal>, ApiError> {
    match presented(headers, read) {
        Some(Presented::Bearer(token) | Presented::Cookie(token)) => {
            gate.resolve(token).await.map(Some)
        }
        None => Ok(None),
    }
}

/// The middleware: resolves the caller, or refuses the request with 401.
pub async fn authenticate(
    State(gate): State<Gate>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let read = matches!(*request.method(), Method::GET | Method::HEAD);
    let principal = match presented(request.headers(), read) {
        Some(Presented::Bearer(token) | Presented::Cookie(token)) => {
            gate.resolve(token).await.inspect_err(|e| {
                tracing::warn!(path = %request.uri().path(), reason = %e.message, "API call refused");
            })?
        }
        None if read && gate.open_reads => Principal::anonymous_reader(),
        None => {
            return Err(ApiError::unauthorized(
                "this endpoint needs `Authorization: Bearer <token>`: the cluster's api token, \
                 or one issued with `trainyard token create`",
            ))
        }
    };
    let extensions = request.extensions();
    let source = match (
        extensions.get::<ConnectInfo<SocketAddr>>(),
        extensions.get::<ConnectInfo<super::tls::PeerAddr>>(),
    ) {
        (Some(plain), _) => plain.0.to_string(),
        (None, Some(tls)) => tls.0 .0.to_string(),
        (None, None) => "unknown".to_string(),
    };
    request
        .extensions_mut()
        .insert(Caller { principal, source });
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn the_bearer_header_wins_and_the_cookie_counts_for_reads_only() {
        let both = headers(&[
            (header::AUTHORIZATION, "Bearer abc"),
            (header::COOKIE, "trainyard_session=xyz"),
        ]);
        assert_eq!(presented(&both, true), Some(Presented::Bearer("abc")));
        let cookie = headers(&[(header::COOKIE, "theme=dark; trainyard_session=xyz; x=1")]);
        assert_eq!(presented(&cookie, true), Some(Presented::Cookie("xyz")));
        assert_eq!(
            presented(&cookie, false),
            None,
            "a cookie never authorises a change"
        );
        let empty = headers(&[(header::COOKIE, "trainyard_session=")]);
        assert_eq!(presented(&empty, true), None);
        assert_eq!(presented(&HeaderMap::new(), true), None);
        let basic = headers(&[(header::AUTHORIZATION, "Basic abc")]);
        assert_eq!(presented(&basic, false), None);
    }
}
