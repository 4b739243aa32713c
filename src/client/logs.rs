//! The captured lines of `GET /v1/tasks/{id}/logs`, decoded: a page of
//! lines with its drop count, or — following — `line` and `dropped`
//! server-sent events. Mirrors the master's `store::LogLineView`.

use super::ClientError;
use serde::{Deserialize, Serialize};

/// One captured line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub attempt: u32,
    /// Increasing within a task: where to go on from.
    pub seq: i64,
    /// `stdout`, `stderr` or `adapter`.
    pub stream: String,
    pub at_ms: i64,
    pub text: String,
}

/// Lines, oldest first, and how many the selected attempts dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPage {
    pub lines: Vec<LogLine>,
    pub dropped: u64,
}

/// What to read: as the query of `GET /v1/tasks/{id}/logs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    pub attempt: Option<u32>,
    pub tail: Option<u32>,
    pub after: Option<i64>,
}

impl LogQuery {
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![];
        if let Some(a) = self.attempt {
            q.push(("attempt", a.to_string()));
        }
        if let Some(t) = self.tail {
            q.push(("tail", t.to_string()));
        }
        if let Some(a) = self.after {
            q.push(("after", a.to_string()));
        }
        q
    }
}

/// One item of a followed log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEvent {
    Line(LogLine),
    /// The attempt's drop count is now this.
    Dropped {
        attempt: u32,
        dropped: u64,
    },
}

#[derive(Deserialize)]
struct Dropped {
    attempt: u32,
    dropped: u64,
}

/// The item for one server-sent event; `None` for events to skip.
pub fn decode(event: &eventsource_stream::Event) -> Option<Result<LogEvent, ClientError>> {
    let unexpected = |reason: String| ClientError::Unexpected {
        what: format!("GET /v1/tasks/{{id}}/logs ({} event)", event.event),
        reason,
    };
    match event.event.as_str() {
        "line" => Some(
            serde_json::from_str(&event.data)
                .map(LogEvent::Line)
                .map_err(|e| unexpected(format!("{e} in {:?}", event.data))),
        ),
        "dropped" => Some(
            serde_json::from_str::<Dropped>(&event.data)
                .map(|d| LogEvent::Dropped {
                    attempt: d.attempt,
                    dropped: d.dropped,
                })
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
    fn lines_and_drops_decode_and_other_events_are_skipped() {
        let line = r#"{"attempt":1,"seq":17,"stream":"stderr","at_ms":5,"text":"oops"}"#;
        let Some(Ok(LogEvent::Line(l))) = decode(&sse("line", line)) else {
            panic!("no line");
        };
        assert_eq!(
            (l.seq, l.stream.as_str(), l.text.as_str()),
            (17, "stderr", "oops")
        );
        assert_eq!(
            decode(&sse("dropped", r#"{"attempt":2,"dropped":40}"#))
                .unwrap()
                .unwrap(),
            LogEvent::Dropped {
                attempt: 2,
                dropped: 40
            }
        );
        assert!(decode(&sse("line", "{")).unwrap().is_err());
        assert!(decode(&sse("something-new", "{}")).is_none());
    }
}
