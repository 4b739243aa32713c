//! Following tasks on the master's live event stream, for `watch`,
//! `submit --wait` and `sweep --wait`: one line per event, reconnecting after a lost
//! connection, and — when waiting for tasks to end — re-reading the tasks
//! themselves whenever events may have been missed (at the start, after a
//! reconnect, after the master reports this client lagged, and after a quiet
//! spell), since the stream never replays what it sent while nobody listened.

use super::format::{self, clock};
use crate::client::{ApiClient, ClientError, StreamEvent, TaskEvent};
use futures::{Stream, StreamExt};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;
use trainyard_master::model::{Task, TaskStatus};
use trainyard_proto::{now_ms, TaskId};

/// An open event stream.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, ClientError>> + Send>>;

/// Opens the event stream (only `task`'s events if given).
pub async fn open(client: &ApiClient, task: Option<TaskId>) -> Result<EventStream, ClientError> {
    Ok(Box::pin(client.events(task).await?))
}

/// The tasks a follower shows, with the last status seen of each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Watched {
    /// Every task, not only those in `tasks`.
    everything: bool,
    /// `None` until the task's status has been seen.
    tasks: BTreeMap<TaskId, Option<TaskStatus>>,
}

impl Watched {
    /// Every task's events.
    pub fn everything() -> Self {
        Self {
            everything: true,
            tasks: BTreeMap::new(),
        }
    }

    /// Only these tasks' events.
    pub fn only(ids: &[TaskId]) -> Self {
        Self {
            everything: false,
            tasks: ids.iter().map(|id| (*id, None)).collect(),
        }
    }

    pub fn shows(&self, task: TaskId) -> bool {
        self.everything || self.tasks.contains_key(&task)
    }

    /// The one task shown, when there is exactly one (the master can then
    /// filter the stream itself).
    pub fn single(&self) -> Option<TaskId> {
        match (self.everything, self.tasks.len()) {
            (false, 1) => self.tasks.keys().next().copied(),
            _ => None,
        }
    }

    /// Records a task's status; true if it is news. A terminal status is
    /// final (the master never changes it again), so an older event read
    /// after it cannot bring the task back to life.
    pub fn record(&mut self, task: TaskId, status: TaskStatus) -> bool {
        if !self.shows(task) {
            return false;
        }
        let known = self.tasks.entry(task).or_insert(None);
        match *known {
            Some(old) if old == status || old.is_terminal() => false,
            _ => {
                *known = Some(status);
                true
            }
        }
    }

    /// Whether every task followed has ended (never, when following everything).
    pub fn all_ended(&self) -> bool {
        !self.everything
            && self
                .tasks
                .values()
                .all(|s| s.is_some_and(TaskStatus::is_terminal))
    }

    /// The tasks not yet seen to end.
    pub fn unfinished(&self) -> Vec<TaskId> {
        self.tasks
            .iter()
            .filter(|(_, s)| !s.is_some_and(TaskStatus::is_terminal))
            .map(|(id, _)| *id)
            .collect()
    }

    /// `2 of 5 tasks did not complete: 8 FAILED, 9 CANCELLED`, unless every task completed.
    pub fn shortfall(&self) -> Option<String> {
        let failed = self.not_completed();
        if failed.is_empty() {
            return None;
        }
        let list: Vec<String> = failed
            .iter()
            .map(|(id, s)| format!("{id} {}", s.map_or("unknown", |s| s.as_str())))
            .collect();
        Some(format!(
            "{} of {} tasks did not complete: {}",
            failed.len(),
            self.tasks.len(),
            list.join(", ")
        ))
    }

    /// The tasks that did not (or not yet) end COMPLETED, with their last status.
    pub fn not_completed(&self) -> Vec<(TaskId, Option<TaskStatus>)> {
        self.tasks
            .iter()
            .filter(|(_, s)| **s != Some(TaskStatus::Completed))
            .map(|(id, s)| (*id, *s))
            .collect()
    }
}

/// How a follower behaves.
#[derive(Clone, Debug)]
pub struct Following {
    /// Stop once every followed task has ended.
    pub until_done: bool,
    /// Pause before reconnecting a lost stream.
    pub reconnect_delay: Duration,
    /// After this long without an event, re-read the unfinished tasks (with `until_done`).
    pub quiet_check: Duration,
}

impl Default for Following {
    fn default() -> Self {
        Self {
            until_done: false,
            reconnect_delay: Duration::from_secs(2),
            quiet_check: Duration::from_secs(10),
        }
    }
}

/// One line for an event: `12:00:01  task 3  attempt 1  host-1  RUNNING  episode 120/300  return 0.82`.
pub fn event_line(e: &TaskEvent) -> String {
    let mut line = format!(
        "{}  task {}  attempt {}  {}  {}",
        clock(e.at_ms),
        e.task,
        e.attempt,
        e.host.as_deref().unwrap_or(format::MISSING),
        e.status
    );
    if e.is_progress() {
        if let Some(p) = &e.progress {
            if let Some(done) = format::episodes(p) {
                line.push_str(&format!("  episode {done}"));
            }
            if let Some(r) = p.episode_return {
                line.push_str(&format!("  return {}", format::number(r)));
            }
            if let Some(m) = &p.message {
                line.push_str(&format!("  {}", format::one_line(m, 100)));
            }
        }
    } else {
        if let Some(m) = e.metrics.as_ref().filter(|m| !m.is_empty()) {
            line.push_str(&format!("  {}", format::one_line(&format::metrics(m), 200)));
        }
        if let Some(err) = &e.error {
            line.push_str(&format!("  error: {}", format::one_line(err, 200)));
        }
    }
    line
}

/// A task's current state as a status event, for changes found by re-reading it.
pub fn status_of(t: &Task) -> TaskEvent {
    TaskEvent {
        task: t.id,
        kind: "status".into(),
        status: t.status,
        attempt: t.attempt,
        host: t.host.clone(),
        progress: None,
        metrics: t.result.as_ref().map(|r| r.metrics.clone()),
        error: t.error.clone(),
        at_ms: t.updated_at_ms,
    }
}

/// Follows `watched` on the event stream (`stream` if already open),
/// writing a line per event to `out`. Returns only with `until_done`, once
/// every task has ended, or on an error that retrying cannot cure (a
/// refused request, a task that does not exist).
pub async fn follow(
    client: &ApiClient,
    watched: &mut Watched,
    how: &Following,
    stream: Option<EventStream>,
    out: &mut (dyn FnMut(&str) + Send),
) -> anyhow::Result<()> {
    let filter = watched.single();
    let mut stream = match stream {
        Some(s) => s,
        None => open(client, filter).await?,
    };
    if !watched.everything {
        check(client, watched, out).await?;
    }
    while !(how.until_done && watched.all_ended()) {
        match tokio::time::timeout(how.quiet_check, stream.next()).await {
            Ok(Some(Ok(StreamEvent::Task(e)))) => {
                if watched.shows(e.task) {
                    watched.record(e.task, e.status);
                    out(&event_line(&e));
                }
            }
            Ok(Some(Ok(StreamEvent::Lagged(n)))) => {
                out(&format!(
                    "{}  missed {n} events: this client fell behind the master",
                    clock(now_ms())
                ));
                if how.until_done {
                    check(client, watched, out).await?;
                }
            }
            // One unreadable event; the stream goes on.
            Ok(Some(Err(e))) if !e.is_transient() => {
                out(&format!("{}  skipped an event: {e}", clock(now_ms())))
            }
            Ok(Some(Err(e))) => {
                out(&format!("{}  {e}", clock(now_ms())));
                stream = reopen(client, filter, how, out).await?;
                check(client, watched, out).await?;
            }
            Ok(None) => {
                out(&format!(
                    "{}  the master closed the event stream",
                    clock(now_ms())
                ));
                stream = reopen(client, filter, how, out).await?;
                check(client, watched, out).await?;
            }
            Err(_quiet) if how.until_done => check(client, watched, out).await?,
            Err(_quiet) => {}
        }
    }
    Ok(())
}

/// Follows the tasks `ids` on `stream` (opened before they were
/// submitted, so no event of theirs is missed) until every one has ended,
/// printing a line per event; returns what was seen of them. What `submit
/// --wait` and `sweep --wait` do.
pub async fn until_ended(
    client: &ApiClient,
    ids: &[TaskId],
    stream: EventStream,
) -> anyhow::Result<Watched> {
    let mut watched = Watched::only(ids);
    let how = Following {
        until_done: true,
        ..Following::default()
    };
    follow(client, &mut watched, &how, Some(stream), &mut |line| {
        println!("{line}")
    })
    .await?;
    Ok(watched)
}

/// Reconnects after `reconnect_delay`, for as long as the master is unreachable.
async fn reopen(
    client: &ApiClient,
    filter: Option<TaskId>,
    how: &Following,
    out: &mut (dyn FnMut(&str) + Send),
) -> anyhow::Result<EventStream> {
    let delay = format::duration(how.reconnect_delay);
    out(&format!("{}  reconnecting in {delay}", clock(now_ms())));
    loop {
        tokio::time::sleep(how.reconnect_delay).await;
        match open(client, filter).await {
            Ok(stream) => {
                out(&format!(
                    "{}  reconnected to the event stream",
                    clock(now_ms())
                ));
                return Ok(stream);
            }
            Err(e) if e.is_transient() => {
                out(&format!("{}  {e}; retrying in {delay}", clock(now_ms())))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Re-reads the unfinished tasks and writes a line for each change found.
async fn check(
    client: &ApiClient,
    watched: &mut Watched,
    out: &mut (dyn FnMut(&str) + Send),
) -> anyhow::Result<()> {
    for id in watched.unfinished() {
        match client.task(id).await {
            Ok(detail) => {
                if watched.record(id, detail.task.status) {
                    out(&event_line(&status_of(&detail.task)));
                }
            }
            // The master is away; the event stream's reconnect will say so.
            Err(e) if e.is_transient() => return Ok(()),
            Err(e) => return Err(anyhow::Error::new(e).context(format!("cannot follow task {id}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
