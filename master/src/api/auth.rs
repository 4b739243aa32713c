//! Bearer-token authentication for the API's mutating endpoints. Reads stay
//! open (health checks, dashboards); anything that changes state needs
//! `Authorization: Bearer <token>`. Tokens are compared in constant time.

use super::error::ApiError;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

pub async fn require_token(
    State(app): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), app.api_token.as_bytes()) => {
            Ok(next.run(request).await)
        }
        Some(_) => {
            tracing::warn!(path = %request.uri().path(), "API call with a wrong token refused");
            Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid API token"))
        }
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this endpoint needs `Authorization: Bearer <token>` (the master's api token)",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_compare_exactly() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"abcd"));
    }
}
