//! `GET /v1/events`: a server-sent event stream of task changes (`status`
//! and `progress` events, JSON), optionally for one task (`?task=ID`). A
//! subscriber too slow to keep up gets a `lagged` event saying how many it
//! missed; it can re-read the tasks it cares about.

use super::AppState;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use std::convert::Infallible;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;
use trainyard_proto::TaskId;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    pub task: Option<TaskId>,
}

pub async fn stream(
    State(app): State<AppState>,
    Query(q): Query<EventQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let events = BroadcastStream::new(app.events.subscribe()).filter_map(move |item| {
        let event = match item {
            Ok(e) if q.task.is_some_and(|t| t != e.task) => None,
            Ok(e) => Event::default()
                .event(match e.kind {
                    crate::events::EventKind::Status => "status",
                    crate::events::EventKind::Progress => "progress",
                })
                .json_data(&e)
                .ok(),
            Err(BroadcastStreamRecvError::Lagged(n)) => {
                Some(Event::default().event("lagged").data(n.to_string()))
            }
        };
        std::future::ready(event.map(Ok))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
