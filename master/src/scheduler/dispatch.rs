//! Matching queued tasks to free slots. The first task in queue order
//! (priority, then age) whose adapter some accepting host carries goes to the
//! eligible host with the most free slots (ties: the one given fewest
//! dispatches). The dispatch is written in this turn's transaction and sent
//! only after it commits.

use super::cycle::{Cycle, PlannedDispatch};
use super::state::Live;
use super::Scheduler;
use crate::model::TaskStatus;
use crate::store::Write;
use std::time::Instant;
use trainyard_proto::{now_ms, AttemptRef, HostId};

impl Scheduler {
    pub(super) fn plan_dispatches(&mut self, cycle: &mut Cycle) {
        let now = Instant::now();
        let deadline_ms = now_ms() + self.config.timers.dispatch_ack_timeout.as_millis() as i64;
        // Hosts that can take work this turn, with their free slots.
        let mut open: Vec<(HostId, u32)> = self
            .state
            .hosts
            .iter()
            .filter(|(_, h)| h.accepting(now))
            .map(|(id, h)| (id.clone(), h.free_slots()))
            .filter(|(_, free)| *free > 0)
            .collect();
        while !open.is_empty() && !self.state.queue.is_empty() {
            let hosts = &self.state.hosts;
            let carried = |adapter: &str| open.iter().any(|(id, _)| hosts[id].carries(adapter));
            let Some(task) = self.state.queue.first_where(carried).cloned() else {
                break;
            };
            let Some(pick) = open
                .iter()
                .enumerate()
                .filter(|(_, (id, _))| hosts[id].carries(&task.adapter))
                .max_by_key(|(_, (id, free))| (*free, std::cmp::Reverse(hosts[id].dispatched)))
                .map(|(i, _)| i)
            else {
                break;
            };
            let host_id = open[pick].0.clone();
            open[pick].1 -= 1;
            if open[pick].1 == 0 {
                open.swap_remove(pick);
            }
            self.state.queue.remove(task.id);
            let attempt = AttemptRef::new(task.id, task.attempt + 1);
            let write = cycle.write(Write::Dispatch {
                task: task.id,
                from_attempt: task.attempt,
                attempt: attempt.attempt,
                host: host_id.to_string(),
                deadline_ms,
            });
            let host = self
                .state
                .hosts
                .get_mut(&host_id)
                .expect("open hosts are connected");
            host.dispatched += 1;
            let session = host.session;
            self.state.assign(
                task.id,
                Live {
                    adapter: task.adapter,
                    priority: task.priority,
                    status: TaskStatus::Dispatched,
                    attempt: attempt.attempt,
                    host: host_id.clone(),
                    slot: None,
                    dispatch_deadline_ms: Some(deadline_ms),
                    cancel_requested: false,
                    runs: task.runs,
                    max_attempts: task.max_attempts,
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
            });
        }
    }

    /// Whether some queued task could go to some free slot right now.
    pub(super) fn dispatch_possible(&self) -> bool {
        let now = Instant::now();
        let open: Vec<_> = self
            .state
            .hosts
            .values()
            .filter(|h| h.accepting(now) && h.free_slots() > 0)
            .collect();
        !open.is_empty()
            && self
                .state
                .queue
                .first_where(|adapter| open.iter().any(|h| h.carries(adapter)))
                .is_some()
    }
}
