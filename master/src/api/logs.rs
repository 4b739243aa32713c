//! `GET /v1/tasks/{id}/logs?attempt=&tail=&after=&follow=`: a task's
//! captured trainer and adapter lines ([`crate::logs`]), oldest first.
//!
//! - Without `follow`: `{"lines": [...], "dropped": N}`, each line
//!   `{"attempt", "seq", "stream", "at_ms", "text"}`. `tail=N` (default
//!   [`DEFAULT_TAIL`], at most [`MAX_LOG_READ`]) gives the last N lines, or
//!   with `after=SEQ` the first N after that seq (paging forward).
//!   `attempt=N` keeps one attempt's. `dropped` counts the lines dropped
//!   for the selected attempts (by their host or by the bound).
//! - With `follow=true`: server-sent events: the same lines first, then new
//!   ones as they are stored, each an `event: line` with the line as data;
//!   `event: dropped` with `{"attempt", "dropped"}` when an attempt's drop
//!   count grows. The stream ends after the last lines once the task has
//!   ended.

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::access::Action;
use crate::store::{LogRead, MAX_LOG_READ};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::convert::Infallible;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use trainyard_proto::TaskId;

/// Lines answered when `tail` is not given.
pub const DEFAULT_TAIL: u32 = 200;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    pub attempt: Option<u32>,
    pub tail: Option<u32>,
    pub after: Option<i64>,
    pub follow: Option<bool>,
}

/// The read a query asks for, or why it is refused.
pub fn read_of(q: &LogQuery) -> Result<LogRead, String> {
    if q.attempt == Some(0) {
        return Err("attempt counts from 1".into());
    }
    if q.after.is_some_and(|a| a < 0) {
        return Err("after must be a line's seq (0 or more)".into());
    }
    let limit = match q.tail {
        None => DEFAULT_TAIL,
        Some(n @ 1..=MAX_LOG_READ) => n,
        Some(n) => return Err(format!("tail {n} is out of range 1..={MAX_LOG_READ}")),
    };
    Ok(LogRead {
        attempt: q.attempt,
        after: q.after,
        limit,
    })
}

pub async fn read(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<TaskId>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) =
        query.map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))?;
    let read = read_of(&q).map_err(ApiError::bad_request)?;
    caller.on_task(&app.store, Action::Read, id).await?;
    if q.follow != Some(true) {
        let lines = app.store.log_lines(id, read).await?;
        let drops = app.store.log_drops(id, read.attempt).await?;
        let dropped: u64 = drops.iter().map(|d| d.dropped).sum();
        return Ok(Json(json!({ "lines": lines, "dropped": dropped })).into_response());
    }
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        if let Err(e) = follow(&app, id, read, &tx).await {
            tracing::warn!(task = id, error = %e.message, "following a task's logs ended early");
        }
    });
    let stream = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// What a follower has sent so far.
struct Sent {
    /// The seq of the last line sent; lines after it come next.
    cursor: i64,
    drops: HashMap<u32, u64>,
}

/// Sends the lines of `read`, then new ones as they are stored, until the
/// task ends (or the client goes).
async fn follow(
    app: &AppState,
    id: TaskId,
    read: LogRead,
    tx: &mpsc::Sender<Event>,
) -> Result<(), ApiError> {
    // Subscribed before the first read, so nothing stored after it is missed.
    let mut stored = app.logs.subscribe();
    let mut events = app.events.subscribe();
    let first = app.store.log_lines(id, read).await?;
    let mut sent = Sent {
        cursor: read.after.unwrap_or(0),
        drops: HashMap::new(),
    };
    if !send_lines(tx, &mut sent, first).await {
        return Ok(());
    }
    let mut ended = is_ended(app, id).await?;
    loop {
        if ended {
            // Lines a host shipped before its report may still be queued.
            app.logs.sync().await;
        }
        if !catch_up(app, id, read.attempt, tx, &mut sent).await? || ended {
            return Ok(());
        }
        let mut news = News {
            id,
            stored: &mut stored,
            events: &mut events,
            tx,
        };
        match news.next(app).await? {
            Some(now_ended) => ended = now_ended,
            None => return Ok(()),
        }
    }
}

/// What a follower waits on.
struct News<'a> {
    id: TaskId,
    stored: &'a mut tokio::sync::broadcast::Receiver<TaskId>,
    events: &'a mut tokio::sync::broadcast::Receiver<crate::events::TaskEvent>,
    tx: &'a mpsc::Sender<Event>,
}

impl News<'_> {
    /// Waits for news of this task: `Some(false)` when it has new lines,
    /// `Some(true)` when it has ended, `None` when the client or the
    /// master has gone.
    async fn next(&mut self, app: &AppState) -> Result<Option<bool>, ApiError> {
        loop {
            tokio::select! {
                news = self.stored.recv() => match news {
                    Ok(task) if task != self.id => continue,
                    Ok(_) | Err(RecvError::Lagged(_)) => return Ok(Some(false)),
                    Err(RecvError::Closed) => return Ok(None),
                },
                event = self.events.recv() => match event {
                    Ok(e) if e.task == self.id && e.status.is_terminal() => return Ok(Some(true)),
                    Ok(_) => continue,
                    Err(RecvError::Lagged(_)) => {
                        if is_ended(app, self.id).await? {
                            return Ok(Some(true));
                        }
                    }
                    Err(RecvError::Closed) => return Ok(None),
                },
                _ = self.tx.closed() => return Ok(None),
            }
        }
    }
}

async fn is_ended(app: &AppState, id: TaskId) -> Result<bool, ApiError> {
    let task = app.store.task(id).await?;
    Ok(task.is_none_or(|t| t.task.status.is_terminal()))
}

/// Sends every line stored after the cursor, and grown drop counts; false
/// once the client has gone.
async fn catch_up(
    app: &AppState,
    id: TaskId,
    attempt: Option<u32>,
    tx: &mpsc::Sender<Event>,
    sent: &mut Sent,
) -> Result<bool, ApiError> {
    loop {
        let read = LogRead {
            attempt,
            after: Some(sent.cursor),
            limit: MAX_LOG_READ,
        };
        let lines = app.store.log_lines(id, read).await?;
        let more = lines.len() == MAX_LOG_READ as usize;
        if !send_lines(tx, sent, lines).await {
            return Ok(false);
        }
        if !more {
            break;
        }
    }
    for d in app.store.log_drops(id, attempt).await? {
        if sent.drops.get(&d.attempt) == Some(&d.dropped) {
            continue;
        }
        sent.drops.insert(d.attempt, d.dropped);
        let event = Event::default().event("dropped").json_data(d);
        if let Ok(event) = event {
            if tx.send(event).await.is_err() {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

async fn send_lines(
    tx: &mpsc::Sender<Event>,
    sent: &mut Sent,
    lines: Vec<crate::store::LogLineView>,
) -> bool {
    for line in lines {
        sent.cursor = sent.cursor.max(line.seq);
        let Ok(event) = Event::default().event("line").json_data(&line) else {
            continue;
        };
        if tx.send(event).await.is_err() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_read_with_its_defaults_and_bad_values_refused() {
        let read = read_of(&LogQuery::default()).unwrap();
        assert_eq!(
            read,
            LogRead {
                attempt: None,
                after: None,
                limit: DEFAULT_TAIL
            }
        );
        let q = LogQuery {
            attempt: Some(2),
            tail: Some(MAX_LOG_READ),
            after: Some(17),
            follow: None,
        };
        assert_eq!(
            read_of(&q).unwrap(),
            LogRead {
                attempt: Some(2),
                after: Some(17),
                limit: MAX_LOG_READ
            }
        );
        for bad in [
            LogQuery {
                tail: Some(0),
                ..LogQuery::default()
            },
            LogQuery {
                tail: Some(MAX_LOG_READ + 1),
                ..LogQuery::default()
            },
            LogQuery {
                attempt: Some(0),
                ..LogQuery::default()
            },
            LogQuery {
                after: Some(-1),
                ..LogQuery::default()
            },
        ] {
            assert!(read_of(&bad).is_err(), "{bad:?}");
        }
    }
}
