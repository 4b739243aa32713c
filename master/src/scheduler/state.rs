//! The scheduler's in-memory picture: the queue, the live tasks, and the
//! connected hosts with what they have free. It mirrors the database, which
//! stays the truth: after any doubt (a failed commit, a write that did not
//! apply) the scheduler rebuilds it from there.
//!
//! A host's free room is its capacity less what the master gave it (each
//! live attempt's request) and less what it still runs that the master no
//! longer counts as its (an attempt given away but not yet stopped, by what
//! the host says that attempt holds).

use super::queue::{Queue, Queued};
use crate::model::{HostStanding, ProgressView, TaskStatus};
use crate::placement::{Catalog, HostView, Need, Reservation, Room, Route};
use crate::recovery::LiveTask;
use crate::standing::{gate, Gate, Recent};
use crate::store::{LiveTask as StoredLive, QueuedTask};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use trainyard_proto::messages::{AdapterInfo, MasterMessage, PythonEnvironment};
use trainyard_proto::resources::HostCapacity;
use trainyard_proto::{AttemptRef, HostId, TaskId};

/// Identifies one connection of a host; a host that reconnects gets a new one,
/// so messages still in flight from its old connection are told apart.
pub type SessionId = u64;

/// A task with an attempt out on a host.
#[derive(Clone, Debug, PartialEq)]
pub struct Live {
    pub route: Route,
    /// What the task asked for, counted against its host while live.
    pub need: Need,
    pub priority: i32,
    pub status: TaskStatus,
    pub attempt: u32,
    pub host: HostId,
    pub slot: Option<u32>,
    pub dispatch_deadline_ms: Option<i64>,
    pub cancel_requested: bool,
    pub runs: u32,
    pub max_attempts: u32,
    /// When the task was submitted, until its first attempt starts
    /// ([`super::queue::Queued::submitted`]).
    pub submitted: Option<Instant>,
    /// Started from its lease alone: the assignment its host gave it is
    /// recorded when the host next names the attempt.
    pub assignment_unknown: bool,
    /// The newest progress of this attempt the master has heard, so the
    /// final progress a report carries is stored only if it was missed.
    pub last_progress: Option<ProgressView>,
    /// When its host started it, as this master saw (for the quarantine's
    /// quick failures).
    pub started: Option<Instant>,
    /// Its host was drained with `--now`: it was told to stop, and its end
    /// requeues the task without using an attempt.
    pub drained: bool,
}

impl Live {
    pub fn attempt_ref(&self, task: TaskId) -> AttemptRef {
        AttemptRef::new(task, self.attempt)
    }

    /// While RUNNING: since when its trainer has been quiet (its last
    /// progress, or its start), in ms since the epoch ([`crate::stall`]).
    pub fn quiet_since_ms(&self, now_ms: i64) -> Option<i64> {
        if self.status != TaskStatus::Running {
            return None;
        }
        let started = (self.started)
            .map(|at| now_ms - i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX));
        let progress = (self.last_progress.as_ref())
            .filter(|p| p.attempt == self.attempt)
            .map(|p| p.at_ms);
        crate::stall::quiet_for_ms(now_ms, progress, started)
            .map(|quiet| now_ms - i64::try_from(quiet).unwrap_or(i64::MAX))
    }

    /// The view the recovery decisions take.
    pub fn view(&self) -> LiveTask {
        LiveTask {
            status: self.status,
            attempt: self.attempt,
            host: self.host.to_string(),
            dispatch_deadline_ms: self.dispatch_deadline_ms,
            cancel_requested: self.cancel_requested,
            runs: self.runs,
            max_attempts: self.max_attempts,
        }
    }
}

/// A connected host.
pub struct Host {
    pub session: SessionId,
    pub addr: SocketAddr,
    pub outbox: mpsc::Sender<MasterMessage>,
    pub slots: u32,
    pub capacity: HostCapacity,
    pub adapters: Arc<[AdapterInfo]>,
    pub agent: String,
    /// The containment layers it enforces.
    pub containment: Vec<String>,
    /// The Python environments in its cache, as its last heartbeat said.
    pub environments: Vec<PythonEnvironment>,
    /// Attempts the master has given this host and not yet seen end, with
    /// what each asked for.
    pub assigned: HashMap<AttemptRef, Need>,
    /// Attempts the host itself last said it runs (hello or heartbeat),
    /// which may include ones it has been told to stop, with what each
    /// holds by the host's account.
    pub reported: HashMap<AttemptRef, Need>,
    pub connected_at: Instant,
    pub last_seen: Instant,
    /// No dispatches before this, after the host refused one.
    pub cooldown_until: Option<Instant>,
    /// How many dispatches this host got, to spread ties.
    pub dispatched: u64,
}

impl Host {
    /// Its whole capacity, slots included.
    pub fn total(&self) -> Room {
        Room::total(self.slots, &self.capacity)
    }

    /// What neither the master's live attempts nor attempts still running
    /// on the host hold.
    pub fn free(&self) -> Room {
        let mut free = self.total();
        for need in self.assigned.values() {
            free.take(need);
        }
        for (attempt, need) in &self.reported {
            if !self.assigned.contains_key(attempt) {
                free.take(need);
            }
        }
        free
    }

    pub fn free_slots(&self) -> u32 {
        self.free().slots
    }

    pub fn accepting(&self, now: Instant) -> bool {
        self.cooldown_until.is_none_or(|until| now >= until)
    }

    pub fn view(&self, id: &HostId, now: Instant) -> HostView {
        HostView {
            id: id.clone(),
            adapters: self.adapters.clone(),
            total: self.total(),
            free: self.free(),
            accepting: self.accepting(now),
            closed: None,
            dispatched: self.dispatched,
        }
    }
}

/// A host the master has seen, connected now or not: what submissions are
/// checked against.
#[derive(Clone, Debug, PartialEq)]
pub struct KnownHost {
    pub slots: u32,
    pub adapters: Vec<AdapterInfo>,
    /// `None` for a host recorded before hosts declared capacity.
    pub capacity: Option<HostCapacity>,
}

#[derive(Default)]
pub struct State {
    pub queue: Queue,
    pub live: HashMap<TaskId, Live>,
    pub hosts: HashMap<HostId, Host>,
    /// Adapters some host has ever carried (or the operator declared), with
    /// the union of their kinds; what submissions are checked against.
    pub catalog: Catalog,
    /// Every host ever seen, by its latest hello.
    pub known_hosts: HashMap<HostId, KnownHost>,
    /// The host held for a task that waited too long (see
    /// [`crate::placement::fit`]).
    pub reservation: Option<Reservation>,
    /// Stale attempts found in Redis at start-up, by host: each is told to
    /// stop when its host connects.
    pub stale_on_connect: HashMap<HostId, BTreeSet<AttemptRef>>,
    /// The hosts each unfinished task failed on for the host's own reasons,
    /// which placement avoids for it while another host can run it. Kept
    /// in the database as the task's `HOST_FAULT` attempts.
    pub failed_on: FailedOn,
    /// Whether each host ever seen takes new work (drain, quarantine), as
    /// stored.
    pub standing: HashMap<HostId, HostStanding>,
    /// How each host's recent attempts ended, for the quarantine (since
    /// this master started).
    pub recent: HashMap<HostId, Recent>,
    /// The probe task each quarantined host runs, if any.
    pub probes: HashMap<HostId, AttemptRef>,
    /// How many of each unfinished task's attempts ended STALLED; kept in
    /// the database as those attempts (see [`crate::stall`]).
    pub stalled: HashMap<TaskId, u32>,
}

/// Hosts by task: where each failed for the host's own reasons.
pub type FailedOn = HashMap<TaskId, Vec<HostId>>;

impl State {
    /// Counts the stalls of unfinished tasks, one entry per STALLED
    /// attempt, as [`crate::store::Store::stalls`] reads them.
    pub fn count_stalls(&mut self, stalls: Vec<TaskId>) {
        self.stalled.clear();
        for task in stalls {
            *self.stalled.entry(task).or_default() += 1;
        }
    }

    /// Replaces the queue and the live tasks with what the database holds.
    pub fn load(
        &mut self,
        pending: Vec<QueuedTask>,
        live: Vec<StoredLive>,
        host_faults: Vec<(TaskId, String)>,
    ) {
        self.failed_on.clear();
        self.stalled.clear();
        for (task, host) in host_faults {
            if let Ok(host) = HostId::new(host) {
                self.failed_on.entry(task).or_default().push(host);
            }
        }
        self.queue = Queue::default();
        let now = Instant::now();
        for t in pending {
            self.queue.push(Queued {
                id: t.id,
                route: Route::new(t.adapter, t.kind).pinned(t.version),
                need: Need::of(&t.resources),
                priority: t.priority,
                attempt: t.attempt,
                runs: t.runs,
                max_attempts: t.max_attempts,
                since: now,
                submitted: None,
            });
        }
        for host in self.hosts.values_mut() {
            host.assigned.clear();
        }
        self.live.clear();
        for t in live {
            let Ok(host) = HostId::new(t.host.clone()) else {
                tracing::error!(task = t.id, host = %t.host, "live task names an invalid host id; leaving it to the sweep");
                continue;
            };
            let live = Live {
                route: Route::new(t.adapter, t.kind).pinned(t.version),
                need: Need::of(&t.resources),
                priority: t.priority,
                status: t.status,
                attempt: t.attempt,
                host,
                slot: t.slot,
                dispatch_deadline_ms: t.dispatch_deadline_ms,
                cancel_requested: t.cancel_requested,
                runs: t.runs,
                max_attempts: t.max_attempts,
                submitted: None,
                assignment_unknown: false,
                last_progress: t.progress,
                started: None,
                drained: false,
            };
            self.assign(t.id, live);
        }
    }

    /// Records a live attempt and counts it against its host.
    pub fn assign(&mut self, task: TaskId, live: Live) {
        if let Some(host) = self.hosts.get_mut(&live.host) {
            host.assigned.insert(live.attempt_ref(task), live.need);
        }
        if let Some(old) = self.live.insert(task, live) {
            if let Some(host) = self.hosts.get_mut(&old.host) {
                host.assigned.remove(&old.attempt_ref(task));
            }
        }
    }

    /// Forgets a live attempt.
    pub fn release(&mut self, task: TaskId) -> Option<Live> {
        let live = self.live.remove(&task)?;
        if let Some(host) = self.hosts.get_mut(&live.host) {
            // Its share stays taken while the host still says it runs it
            // (`reported`): an attempt given away may not have stopped yet.
            host.assigned.remove(&live.attempt_ref(task));
        }
        Some(live)
    }

    /// The live task if `attempt` is its current attempt and `host` runs it.
    pub fn current(&self, attempt: AttemptRef, host: &HostId) -> Option<&Live> {
        self.live
            .get(&attempt.task)
            .filter(|l| l.attempt == attempt.attempt && &l.host == host)
    }

    /// Attempts of live tasks the master gave to `host`, with their needs.
    pub fn assigned_to(&self, host: &HostId) -> HashMap<AttemptRef, Need> {
        self.live
            .iter()
            .filter(|(_, l)| &l.host == host)
            .map(|(id, l)| (l.attempt_ref(*id), l.need))
            .collect()
    }

    /// Remembers what a host carries and offers.
    pub fn saw(&mut self, id: &HostId, host: KnownHost) {
        self.catalog.learn(&host.adapters);
        self.known_hosts.insert(id.clone(), host);
    }

    /// The connected hosts as placement sees them, by id.
    /// The connected hosts as placement sees them: a drained or quarantined
    /// host is closed, one due a probe offers one slot.
    pub fn host_views(&self, now: Instant) -> Vec<HostView> {
        let now_ms = trainyard_proto::now_ms();
        let mut views: Vec<HostView> = self
            .hosts
            .iter()
            .map(|(id, h)| {
                let mut view = h.view(id, now);
                let standing = self.standing.get(id).cloned().unwrap_or_default();
                match gate(&standing, now_ms, !h.assigned.is_empty()) {
                    Gate::Open => {}
                    Gate::Probe => view.free.slots = view.free.slots.min(1),
                    Gate::Closed(why) => view.closed = Some(why),
                }
                view
            })
            .collect();
        views.sort_by(|a, b| a.id.cmp(&b.id));
        views
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(slots: u32, gpus: u32) -> Host {
        let (outbox, _rx) = mpsc::channel(1);
        Host {
            session: 1,
            addr: "127.0.0.1:1".parse().unwrap(),
            outbox,
            slots,
            capacity: HostCapacity {
                cpus: 4.0,
                memory_bytes: 8 << 30,
                gpus: (0..gpus).map(|g| g.to_string()).collect(),
            },
            adapters: Arc::from(Vec::new()),
            agent: String::new(),
            containment: vec![],
            environments: vec![],
            assigned: HashMap::new(),
            reported: HashMap::new(),
            connected_at: Instant::now(),
            last_seen: Instant::now(),
            cooldown_until: None,
            dispatched: 0,
        }
    }

    fn gpus(n: u32) -> Need {
        Need {
            gpus: n,
            ..Need::default()
        }
    }

    #[test]
    fn a_slot_and_its_devices_stay_busy_while_the_host_still_runs_an_attempt_it_was_told_to_stop() {
        let mut h = host(2, 2);
        h.assigned.insert(AttemptRef::new(1, 1), gpus(1));
        h.reported.insert(AttemptRef::new(1, 1), gpus(1));
        assert_eq!((h.free().slots, h.free().gpus), (1, 1));
        h.reported.insert(AttemptRef::new(9, 1), gpus(1)); // a zombie attempt
        assert_eq!((h.free().slots, h.free().gpus), (0, 0));
    }

    #[test]
    fn releasing_a_task_frees_its_hosts_share() {
        let mut state = State::default();
        let id = HostId::new("h").unwrap();
        state.hosts.insert(id.clone(), host(1, 2));
        let live = Live {
            route: Route::new("a", "k"),
            need: gpus(2),
            priority: 0,
            status: TaskStatus::Running,
            attempt: 1,
            host: id.clone(),
            slot: Some(0),
            dispatch_deadline_ms: None,
            cancel_requested: false,
            runs: 1,
            max_attempts: 3,
            submitted: None,
            assignment_unknown: false,
            last_progress: None,
            started: None,
            drained: false,
        };
        state.assign(7, live);
        assert_eq!(
            state.hosts[&id].free(),
            Room {
                slots: 0,
                millicpus: 4000,
                memory_bytes: 8 << 30,
                gpus: 0
            }
        );
        assert!(state.current(AttemptRef::new(7, 1), &id).is_some());
        assert!(state.current(AttemptRef::new(7, 2), &id).is_none());
        state.release(7);
        assert_eq!(
            (state.hosts[&id].free_slots(), state.hosts[&id].free().gpus),
            (1, 2)
        );
    }
}
