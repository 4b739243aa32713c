//! What can go wrong talking to the master, phrased for the operator who
//! typed the command: which master could not be reached, what it refused and
//! why (its own `{"error": ...}` message), and what to change when the API
//! token is missing or wrong.

/// An API call that did not produce what was asked for.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid master URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot set up the HTTP client: {0}")]
    Setup(String),
    /// No connection could be opened: the master is down, or the URL is wrong.
    #[error("cannot reach the master at {url}: {reason} (is `trainyard master` running?)")]
    Unreachable { url: String, reason: String },
    /// A connection was open but the exchange broke off (timeout, reset).
    #[error("lost the connection to the master at {url}: {reason}")]
    Connection { url: String, reason: String },
    /// A master took a request that changes something and said nothing
    /// within the failover timeout. Sent to another master, it could be
    /// applied twice (the silent one may have committed it), so it was not.
    #[error("no answer from the master at {url} within {after:?}; the request may have been applied there, so it was not sent to another master: check (`trainyard tasks`, `trainyard task ID`) before sending it again")]
    NoAnswer {
        url: String,
        after: std::time::Duration,
    },
    /// A mutating endpoint was called without a token.
    #[error("401: this endpoint needs a token: set api.token or api.token_file, or TRAINYARD_API__TOKEN")]
    TokenMissing,
    /// A token was sent and the master did not accept it.
    #[error("401: the master refused the API token ({message}): make api.token or api.token_file match the master's")]
    TokenRefused { message: String },
    /// A 4xx answer: the request itself is wrong (unknown adapter, no such task, already ended...).
    #[error("the master refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    /// A 5xx answer: the master could not do it right now (database or scheduler unavailable).
    #[error("the master failed the request ({status}): {message}")]
    Failed { status: u16, message: String },
    /// A success whose body is not what this client understands (a different trainyard version?).
    #[error("unexpected answer from the master to {what}: {reason}")]
    Unexpected { what: String, reason: String },
    /// Standbys kept sending the request on: the masters disagree about
    /// which of them leads (an election under way, or a misconfigured
    /// advertised URL).
    #[error("the request was redirected more than {hops} times, last to {url}; the masters do not agree on a leader")]
    Redirects { url: String, hops: usize },
    /// The live event stream broke off after it had started.
    #[error("the event stream from {url} broke off: {reason}")]
    EventStream { url: String, reason: String },
}

impl ClientError {
    /// The error for a non-success answer: `status` with its `body`.
    /// `token_sent` says whether the request carried a bearer token, which
    /// decides what to tell the operator about a 401.
    pub fn from_response(status: u16, body: &str, token_sent: bool) -> Self {
        let message = error_message(status, body);
        match status {
            401 if token_sent => Self::TokenRefused { message },
            401 => Self::TokenMissing,
            400..=499 => Self::Refused { status, message },
            _ => Self::Failed { status, message },
        }
    }

    /// The HTTP status the master answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::TokenMissing | Self::TokenRefused { .. } => Some(401),
            Self::Refused { status, .. } | Self::Failed { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether trying again later may succeed (the master or the network
    /// was down), as opposed to a request that will be refused again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. }
                | Self::Connection { .. }
                | Self::Redirects { .. }
                | Self::EventStream { .. }
                | Self::Failed { .. }
        )
    }

    /// The error for a request that got no answer.
    pub(crate) fn transport(url: &str, e: &reqwest::Error) -> Self {
        let reason = transport_reason(e);
        if e.is_connect() {
            Self::Unreachable {
                url: url.to_string(),
                reason,
            }
        } else {
            Self::Connection {
                url: url.to_string(),
                reason,
            }
        }
    }
}

/// The error that ends an event stream.
pub(super) fn event_stream_error(
    url: &str,
    e: eventsource_stream::EventStreamError<reqwest::Error>,
) -> ClientError {
    use eventsource_stream::EventStreamError;
    let reason = match e {
        EventStreamError::Transport(e) => transport_reason(&e),
        EventStreamError::Utf8(e) => format!("not UTF-8 text: {e}"),
        EventStreamError::Parser(e) => format!("not server-sent events: {e}"),
    };
    ClientError::EventStream {
        url: url.to_string(),
        reason,
    }
}

/// Longest part of a non-JSON error body quoted back to the operator.
const MAX_QUOTED_BODY: usize = 300;

/// The master's explanation from an error body: the `error` field of
/// `{"error": "..."}`, else the body itself (a proxy's page, say), else the
/// status's standard reason.
pub fn error_message(status: u16, body: &str) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
    }
    if let Ok(parsed) = serde_json::from_str::<ErrorBody>(body) {
        return parsed.error;
    }
    let body = body.trim();
    if !body.is_empty() {
        return match body.char_indices().nth(MAX_QUOTED_BODY) {
            Some((cut, _)) => format!("{}…", &body[..cut]),
            None => body.to_string(),
        };
    }
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("no explanation given")
        .to_lowercase()
}

/// A short cause for a failed exchange: the operating system's verdict
/// ("connection refused") when there is one, else the innermost error.
fn transport_reason(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    let mut innermost: &dyn std::error::Error = e;
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return io_reason(io);
        }
        innermost = cause;
        source = cause.source();
    }
    innermost.to_string()
}

fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => "connection refused".into(),
        ErrorKind::ConnectionReset => "connection reset".into(),
        ErrorKind::ConnectionAborted => "connection aborted".into(),
        ErrorKind::TimedOut => "timed out".into(),
        ErrorKind::UnexpectedEof => "the connection closed early".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_quotes_the_masters_error_field() {
        let e = ClientError::from_response(
            422,
            r#"{"error": "unknown adapter \"x\"; known adapters: python-trainer"}"#,
            true,
        );
        assert_eq!(
            e.to_string(),
            r#"the master refused the request (422): unknown adapter "x"; known adapters: python-trainer"#
        );
        assert_eq!(e.status(), Some(422));
        assert!(!e.is_transient());
    }

    #[test]
    fn a_missing_token_says_where_to_set_one() {
        let body = r#"{"error": "this endpoint needs `Authorization: Bearer <token>` (the master's api token)"}"#;
        assert_eq!(
            ClientError::from_response(401, body, false).to_string(),
            "401: this endpoint needs a token: set api.token or api.token_file, or TRAINYARD_API__TOKEN"
        );
    }

    #[test]
    fn a_wrong_token_is_told_apart_from_a_missing_one() {
        let e = ClientError::from_response(401, r#"{"error": "invalid API token"}"#, true);
        assert_eq!(
            e.to_string(),
            "401: the master refused the API token (invalid API token): make api.token or api.token_file match the master's"
        );
    }

    #[test]
    fn a_server_failure_is_transient_and_keeps_its_message() {
        let e = ClientError::from_response(
            503,
            r#"{"error": "task store unavailable: pool timed out"}"#,
            false,
        );
        assert_eq!(
            e.to_string(),
            "the master failed the request (503): task store unavailable: pool timed out"
        );
        assert!(e.is_transient());
    }

    #[test]
    fn a_body_that_is_not_an_error_object_is_quoted_or_replaced_by_the_reason() {
        assert_eq!(
            error_message(502, "<html>Bad Gateway</html>\n"),
            "<html>Bad Gateway</html>"
        );
        assert_eq!(error_message(404, ""), "not found");
        assert_eq!(
            error_message(400, r#"{"message": "x"}"#),
            r#"{"message": "x"}"#
        );
        let long = "é".repeat(1000);
        let quoted = error_message(500, &long);
        assert_eq!(quoted.chars().count(), MAX_QUOTED_BODY + 1);
        assert!(quoted.ends_with('…'));
    }
}
