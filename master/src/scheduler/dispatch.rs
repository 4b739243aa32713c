//! Turning a turn's placement plan ([`super::plan`]) into dispatches: each
//! placed task becomes DISPATCHED on its host in this turn's transaction,
//! and its Dispatch message goes out only after that commits. After
//! planning, the hosts as placement left them are published for the API
//! (see [`crate::placement::Snapshot`]).

use super::cycle::{Cycle, PlannedDispatch};
use super::plan::plan;
use super::state::Live;
use super::tally::Counted;
use super::Scheduler;
use crate::model::TaskStatus;
use crate::placement::{fit::may_take, Snapshot};
use crate::store::Write;
use std::sync::Arc;
use std::time::Instant;
use trainyard_proto::{now_ms, AttemptRef};

impl Scheduler {
    pub(super) fn plan_dispatches(&mut self, cycle: &mut Cycle) {
        if self.state.queue.is_empty() {
            self.state.reservation = None;
            return;
        }
        let now = Instant::now();
        let deadline_ms = now_ms() + self.config.timers.dispatch_ack_timeout.as_millis() as i64;
        let mut hosts = self.state.host_views(now);
        let placed = plan(
            &mut self.state.queue,
            &mut hosts,
            &mut self.state.reservation,
            now,
            self.config.reserve_after,
            self.config.versions,
            &self.state.failed_on,
        );
        for p in placed {
            let host_id = hosts[p.host].id.clone();
            let task = p.task;
            let attempt = AttemptRef::new(task.id, task.attempt + 1);
            let version = task
                .route
                .version_on(&hosts[p.host].adapters)
                .unwrap_or_default();
            cycle.count(Counted::QueueWait(
                now.saturating_duration_since(task.since),
            ));
            let write = cycle.write(Write::Dispatch {
                task: task.id,
                from_attempt: task.attempt,
                attempt: attempt.attempt,
                host: host_id.to_string(),
                deadline_ms,
                version: Some(version.clone()),
            });
            let host = self
                .state
                .hosts
                .get_mut(&host_id)
                .expect("placement only uses connected hosts");
            host.dispatched += 1;
            let session = host.session;
            self.note_probe(&host_id, attempt);
            self.state.assign(
                task.id,
                Live {
                    route: task.route,
                    need: task.need,
                    priority: task.priority,
                    status: TaskStatus::Dispatched,
                    attempt: attempt.attempt,
                    host: host_id.clone(),
                    slot: None,
                    dispatch_deadline_ms: Some(deadline_ms),
                    cancel_requested: false,
                    runs: task.runs,
                    max_attempts: task.max_attempts,
                    submitted: task.submitted,
                    assignment_unknown: false,
                    last_progress: None,
                    started: None,
                    drained: false,
                },
            );
            cycle.events.push(self.event(
                task.id,
                TaskStatus::Dispatched,
                attempt.attempt,
                Some(&host_id),
            ));
            cycle.dispatches.push(PlannedDispatch {
                write,
                host: host_id,
                session,
                attempt,
                version,
            });
        }
        self.publish_placement(hosts);
    }

    /// Publishes the hosts as this turn left them, if anything changed.
    fn publish_placement(&mut self, hosts: Vec<crate::placement::HostView>) {
        let snapshot = Snapshot {
            hosts,
            reservation: self.state.reservation.clone(),
            versions: self.config.versions,
        };
        self.placement.send_if_modified(|current| {
            if **current == snapshot {
                return false;
            }
            *current = Arc::new(snapshot);
            true
        });
    }

    /// Whether some queued task could go to some host right now.
    pub(super) fn dispatch_possible(&self) -> bool {
        if self.state.queue.is_empty() {
            return false;
        }
        let hosts = self.state.host_views(Instant::now());
        let held = self.state.reservation.as_ref();
        self.state
            .queue
            .first_where(|class, head| {
                hosts
                    .iter()
                    .any(|h| may_take(h, &class.route, &class.need, head, held))
            })
            .is_some()
    }
}
