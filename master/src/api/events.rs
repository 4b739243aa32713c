//! `GET /v1/events`: a server-sent event stream of task changes (`status`
//! and `progress` events, JSON), optionally for one task (`?task=ID`). A
//! subscriber too slow to keep up gets a `lagged` event saying how many it
//! missed; it can re-read the tasks it cares about.
//!
//! A team's principal hears only its team's tasks: each task's team is read
//! once per subscriber and remembered, so another team's events are dropped
//! without reaching the client.

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::access::Action;
use crate::events::TaskEvent;
use crate::store::Store;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;
use trainyard_proto::TaskId;

/// Most task teams a subscriber remembers before starting afresh.
const MAX_REMEMBERED: usize = 100_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    pub task: Option<TaskId>,
}

/// Which tasks' events one subscriber may hear.
#[derive(Clone)]
struct Audience {
    store: Store,
    /// The subscriber's team; `None`: every team's.
    team: Option<String>,
    /// Whether each task seen so far is the subscriber's team's.
    seen: Arc<Mutex<HashMap<TaskId, bool>>>,
}

impl Audience {
    async fn hears(&self, task: TaskId) -> bool {
        let Some(team) = &self.team else {
            return true;
        };
        if let Some(known) = self.seen.lock().expect("audience").get(&task) {
            return *known;
        }
        // A store error drops the event: never shown when unsure.
        let Ok(found) = self.store.task_team(task).await else {
            return false;
        };
        let ours = found.as_deref() == Some(team.as_str());
        let mut seen = self.seen.lock().expect("audience");
        if seen.len() >= MAX_REMEMBERED {
            seen.clear();
        }
        seen.insert(task, ours);
        ours
    }
}

fn event_of(e: &TaskEvent) -> Option<Event> {
    Event::default()
        .event(match e.kind {
            crate::events::EventKind::Status => "status",
            crate::events::EventKind::Progress => "progress",
        })
        .json_data(e)
        .ok()
}

pub async fn stream(
    State(app): State<AppState>,
    caller: Caller,
    Query(q): Query<EventQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    caller.may(Action::Read)?;
    if let Some(task) = q.task {
        caller.on_task(&app.store, Action::Read, task).await?;
    }
    let audience = Audience {
        store: app.store.clone(),
        team: caller.principal.scope().map(str::to_string),
        seen: Arc::default(),
    };
    let events = BroadcastStream::new(app.events.subscribe()).filter_map(move |item| {
        let audience = audience.clone();
        async move {
            let event = match item {
                Ok(e) if q.task.is_some_and(|t| t != e.task) => None,
                Ok(e) if !audience.hears(e.task).await => None,
                Ok(e) => event_of(&e),
                Err(BroadcastStreamRecvError::Lagged(n)) => {
                    Some(Event::default().event("lagged").data(n.to_string()))
                }
            };
            event.map(Ok)
        }
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}
