//! The live event stream of `GET /v1/events`, decoded: server-sent events
//! named `status` or `progress` carry a JSON [`TaskEvent`]; `lagged` says how
//! many events the master dropped because this subscriber fell behind (the
//! subscriber should re-read the tasks it cares about). Keep-alive comments
//! and events of kinds this client does not know are skipped.

use super::ClientError;
use serde::{Deserialize, Serialize};
use trainyard_master::model::{Metrics, ProgressView, TaskStatus};
use trainyard_proto::TaskId;

/// A change to one task, as the master announces it. Mirrors the master's
/// `events::TaskEvent`, which is serialise-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub task: TaskId,
    /// `status` (status, attempt or host changed) or `progress` (the current attempt reported progress).
    pub kind: String,
    pub status: TaskStatus,
    pub attempt: u32,
    pub host: Option<String>,
    pub progress: Option<ProgressView>,
    /// The final metrics, on the status event of a finished attempt.
    pub metrics: Option<Metrics>,
    pub error: Option<String>,
    pub at_ms: i64,
}

impl TaskEvent {
    pub fn is_progress(&self) -> bool {
        self.kind == "progress"
    }
}

/// One item of the event stream.
// Items are handled one at a time as they arrive, never kept in bulk, so
// the size of the `Task` variant costs nothing worth an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    Task(TaskEvent),
    /// The master dropped this many events for this subscriber.
    Lagged(u64),
}

/// The stream item for one server-sent event; `None` for events to skip.
/// A malformed event is an error item, and the stream goes on after it.
pub fn decode(event: &eventsource_stream::Event) -> Option<Result<StreamEvent, ClientError>> {
    let unexpected = |reason: String| ClientError::Unexpected {
        what: format!("GET /v1/events ({} event)", event.event),
        reason,
    };
    match event.event.as_str() {
        "status" | "progress" => Some(
            serde_json::from_str(&event.data)
                .map(StreamEvent::Task)
                .map_err(|e| unexpected(format!("{e} in {:?}", event.data))),
        ),
        "lagged" => Some(
            event
                .data
                .trim()
                .parse()
                .map(StreamEvent::Lagged)
                .map_err(|e| unexpected(format!("{e} in {:?}", event.data))),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(event: &str, data: &str) -> eventsource_stream::Event {
        eventsource_stream::Event {
            event: event.into(),
            data: data.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_progress_event_carries_the_episode_and_return() {
        let data = r#"{"task":3,"kind":"progress","status":"RUNNING","attempt":1,"host":"host-1",
            "progress":{"attempt":1,"episode":120,"total_episodes":300,"episode_return":0.82,"metrics":{},"message":null,"at_ms":5},
            "metrics":null,"error":null,"at_ms":5}"#;
        let Some(Ok(StreamEvent::Task(e))) = decode(&sse("progress", data)) else {
            panic!("not decoded as a task event");
        };
        assert!(e.is_progress());
        assert_eq!(
            (e.task, e.status, e.host.as_deref()),
            (3, TaskStatus::Running, Some("host-1"))
        );
        let p = e.progress.expect("progress");
        assert_eq!(
            (p.episode, p.total_episodes, p.episode_return),
            (Some(120), Some(300), Some(0.82))
        );
    }

    #[test]
    fn lagged_counts_and_unknown_events_are_skipped() {
        assert_eq!(
            decode(&sse("lagged", "17")).map(|r| r.ok()),
            Some(Some(StreamEvent::Lagged(17)))
        );
        assert!(decode(&sse("message", "hello")).is_none());
    }

    #[test]
    fn a_malformed_event_is_an_error_that_names_it() {
        let Some(Err(e)) = decode(&sse("status", r#"{"task": "x"}"#)) else {
            panic!("a malformed event must be an error");
        };
        assert!(e
            .to_string()
            .starts_with("unexpected answer from the master to GET /v1/events (status event)"));
    }
}
