//! The scheduler: one task that owns the queue, the live attempts and the
//! connected hosts, and is the only writer of task state.
//!
//! Everything reaches it as a [`Command`] (from the API and from host
//! sessions) on one channel. It runs in turns: take every waiting command,
//! decide (pure code over the in-memory [`state`]), run the recovery sweep
//! when it is due, plan dispatches for free slots, then commit all the turn's
//! writes in one transaction and only then act on them (see [`cycle`]); the
//! commit overlaps the next turn (`commit`). Under
//! load a turn carries thousands of commands, so the database sees a few large
//! transactions instead of many small ones.
//!
//! At the end of every turn it publishes a [`Snapshot`] (counters and
//! connected hosts) that the API reads without waiting on it.
//!
//! Modules: [`queue`] (pending tasks), [`state`] (the in-memory picture),
//! [`counts`] (tasks by status, without asking the database),
//! [`cycle`] (one turn's effects), [`snapshot`] (what the API reads),
//! `hosts` (admission, sessions and their messages), `progress` (an
//! attempt's progress and its history), `reports` (recording
//! an attempt's end), [`plan`] (which task goes where, pure), `dispatch`
//! (turning the plan into writes), `commit` (a turn's transaction and
//! what follows it), `recover` (the sweep and start-up reconciliation).

mod commit;
pub mod counts;
pub mod cycle;
mod dispatch;
mod hosts;
pub mod plan;
mod progress;
pub mod queue;
mod recover;
mod reports;
pub mod snapshot;
pub mod standing;
pub mod state;
pub mod tally;

pub use recover::{ReconcileStats, RecoveryCosts, SweepStats};
pub use snapshot::{Snapshot, SnapshotReader};

use crate::events::{EventKind, Events, TaskEvent};
use crate::logs::LogFeed;
use crate::model::{NewTask, TaskStatus};
use crate::placement::{self, RouteError};
use crate::search::{NewSweep, SweepId};
use crate::store::{Store, Write};
use cycle::Cycle;
use serde::Serialize;
use state::{SessionId, State};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use trainyard_proto::keys::Keys;
use trainyard_proto::messages::{
    AdapterInfo, Hello, HostMessage, MasterMessage, PythonEnvironment,
};
use trainyard_proto::redis_link::RedisLink;
use trainyard_proto::resources::HostCapacity;
use trainyard_proto::{now_ms, AttemptRef, HostId, TaskId, Timers};

/// A request to the scheduler.
pub enum Command {
    Submit {
        tasks: Vec<NewTask>,
        reply: oneshot::Sender<Result<Vec<TaskId>, SubmitError>>,
    },
    Cancel {
        task: TaskId,
        reply: oneshot::Sender<CancelOutcome>,
    },
    /// A sweep and its trials' tasks, stored together or not at all.
    CreateSweep {
        sweep: NewSweep,
        tasks: Vec<NewTask>,
        reply: oneshot::Sender<Result<SweepCreated, SubmitError>>,
    },
    /// Cancels many tasks in one turn (a sweep's trials).
    CancelMany {
        tasks: Vec<(TaskId, oneshot::Sender<CancelOutcome>)>,
    },
    /// A host proved it knows the secret and asks to be connected.
    /// `contested` is when the scheduler probed another connection holding
    /// the same id, on the second asking.
    Admit {
        hello: Box<Hello>,
        session: SessionId,
        addr: SocketAddr,
        outbox: mpsc::Sender<MasterMessage>,
        contested: Option<Instant>,
        reply: oneshot::Sender<Admission>,
    },
    Disconnected {
        host: HostId,
        session: SessionId,
    },
    /// A message from a connected host.
    Message {
        host: HostId,
        session: SessionId,
        message: HostMessage,
    },
    /// An operator drains, undrains or unquarantines a host.
    Standing {
        host: HostId,
        change: standing::StandingChange,
        reply: standing::StandingReply,
    },
}

/// The scheduler's answer to [`Command::Admit`].
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Connected: send the welcome.
    Welcome,
    /// Another connection holds the id and was just probed; ask again with
    /// `contested: Some(since)` after the probe timeout.
    Probing { since: Instant },
    /// Another connection holds the id and answered: refused, with why.
    Refused(String),
}

/// Why a submission was refused; nothing of it was stored.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum SubmitError {
    #[error(transparent)]
    Route(#[from] RouteError),
    /// A request no host carrying the route has ever had room for.
    #[error("{0}")]
    TooLarge(String),
    #[error("the task store is unavailable: {0}")]
    Unavailable(String),
}

/// A sweep as stored: its id and its trials' task ids, in trial order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepCreated {
    pub id: SweepId,
    pub tasks: Vec<TaskId>,
}

/// What a cancellation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CancelOutcome {
    /// The task was waiting and is now CANCELLED.
    Cancelled,
    /// The task runs; its host was told to stop it, and it ends CANCELLED
    /// when the host reports (or its lease lapses).
    CancelRequested,
    /// The task is neither queued nor live (finished, or no such task).
    NotLive,
    /// The scheduler could not record the cancellation.
    Unavailable,
}

/// A connected host, as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostSnapshot {
    pub id: String,
    pub addr: String,
    pub slots: u32,
    pub free_slots: u32,
    pub capacity: HostCapacity,
    /// What no live attempt holds: CPUs, memory, GPUs.
    pub free: FreeResources,
    pub adapters: Vec<AdapterInfo>,
    pub agent: String,
    /// The containment layers it enforces on trainers.
    pub containment: Vec<String>,
    /// The Python environments in its cache.
    pub environments: Vec<PythonEnvironment>,
    pub connected_for_ms: u64,
    pub last_seen_ms_ago: u64,
    pub running: Vec<RunningSnapshot>,
    /// Whether it takes new work (drained, quarantined).
    pub standing: crate::model::HostStanding,
}

/// A host's free share, as the API shows it.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct FreeResources {
    pub cpus: f64,
    pub memory_bytes: u64,
    pub gpus: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunningSnapshot {
    pub task: TaskId,
    pub attempt: u32,
    pub status: TaskStatus,
    pub slot: Option<u32>,
    /// While RUNNING: since when (ms since the epoch) its trainer has
    /// reported no progress, as the master heard it; `None` when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quiet_since_ms: Option<i64>,
}

/// Scheduler counters for health and metrics.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Overview {
    pub queued: usize,
    pub live: usize,
    pub hosts: usize,
    pub free_slots: u32,
    pub redis_ok: bool,
    pub last_sweep_ms_ago: Option<u64>,
    pub turns: u64,
    /// Sweeps that read Redis since start; a poller tells a new
    /// `last_sweep` by this changing.
    pub sweeps: u64,
    pub last_sweep: Option<SweepStats>,
    /// The longest sweep since start.
    pub slowest_sweep: Option<SweepStats>,
    /// The start-up reconciliation; `None` if Redis was unreachable then.
    pub reconcile: Option<ReconcileStats>,
}

/// The scheduler went away (the master is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the scheduler is not running")]
pub struct SchedulerGone;

/// How the rest of the master talks to the scheduler. Cheap to clone.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: mpsc::Sender<Command>,
    placement: watch::Receiver<Arc<placement::Snapshot>>,
    snapshots: SnapshotReader,
}

impl SchedulerHandle {
    pub async fn send(&self, command: Command) -> Result<(), SchedulerGone> {
        self.tx.send(command).await.map_err(|_| SchedulerGone)
    }

    pub async fn submit(&self, tasks: Vec<NewTask>) -> Result<Vec<TaskId>, SubmitError> {
        let (reply, rx) = oneshot::channel();
        let gone = || SubmitError::Unavailable("the scheduler is not running".into());
        self.send(Command::Submit { tasks, reply })
            .await
            .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Stores a sweep with its trials' tasks in one transaction.
    pub async fn create_sweep(
        &self,
        sweep: NewSweep,
        tasks: Vec<NewTask>,
    ) -> Result<SweepCreated, SubmitError> {
        let (reply, rx) = oneshot::channel();
        let gone = || SubmitError::Unavailable("the scheduler is not running".into());
        self.send(Command::CreateSweep {
            sweep,
            tasks,
            reply,
        })
        .await
        .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Cancels every task of `tasks` in one turn; the outcomes come in order.
    pub async fn cancel_many(&self, tasks: &[TaskId]) -> Result<Vec<CancelOutcome>, SchedulerGone> {
        let (pairs, answers): (Vec<_>, Vec<_>) = tasks
            .iter()
            .map(|&task| {
                let (reply, rx) = oneshot::channel();
                ((task, reply), rx)
            })
            .unzip();
        self.send(Command::CancelMany { tasks: pairs }).await?;
        let mut outcomes = Vec::with_capacity(answers.len());
        for answer in answers {
            outcomes.push(answer.await.map_err(|_| SchedulerGone)?);
        }
        Ok(outcomes)
    }

    /// Changes a host's standing; answers with it once stored.
    pub async fn change_standing(
        &self,
        host: HostId,
        change: standing::StandingChange,
    ) -> Result<crate::model::HostStanding, standing::StandingError> {
        let (reply, rx) = oneshot::channel();
        let gone = || standing::StandingError::Unavailable("the scheduler is not running".into());
        self.send(Command::Standing {
            host,
            change,
            reply,
        })
        .await
        .map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    pub async fn cancel(&self, task: TaskId) -> Result<CancelOutcome, SchedulerGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Cancel { task, reply }).await?;
        rx.await.map_err(|_| SchedulerGone)
    }

    /// The connected hosts as of the scheduler's last turn; never waits on it.
    pub async fn hosts(&self) -> Result<Vec<HostSnapshot>, SchedulerGone> {
        Ok(self.snapshot()?.hosts_now())
    }

    /// What the API reads to explain why a task waits.
    pub fn placement(&self) -> watch::Receiver<Arc<placement::Snapshot>> {
        self.placement.clone()
    }

    /// The counters as of the scheduler's last turn; never waits on it.
    pub async fn overview(&self) -> Result<Overview, SchedulerGone> {
        Ok(self.snapshot()?.overview_now())
    }

    /// The scheduler's last published snapshot.
    pub fn snapshot(&self) -> Result<Arc<Snapshot>, SchedulerGone> {
        self.snapshots.latest().ok_or(SchedulerGone)
    }
}

/// What the scheduler needs to know.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub timers: Timers,
    pub max_batch: usize,
    pub known_adapters: Vec<String>,
    /// How long the first task in queue order may wait without fitting
    /// before it reserves a host (see [`crate::placement::fit`]).
    pub reserve_after: Duration,
    /// Which of the versions a task allows it runs.
    pub versions: placement::VersionChoice,
    /// The leader's term its Redis fences carry (0 when masters do not
    /// elect a leader).
    pub term: u64,
    /// When a host is quarantined and probed.
    pub quarantine: crate::standing::QuarantinePolicy,
    /// How many of a task's stalls do not use one of its attempts
    /// (`master.free_stalled_retries`, see [`crate::stall`]).
    pub free_stalled_retries: u32,
}

/// Tracks whether Redis still holds every lease hosts wrote: after it lost
/// its data (its epoch key changed or vanished) missing leases prove nothing
/// until hosts have had a full lease TTL and a heartbeat to write them
/// again — a window that starts in Redis with the new epoch, so it also
/// binds a master that starts inside it.
struct Epoch {
    known: Option<String>,
    distrust_until: Option<Instant>,
}

impl Epoch {
    fn trustworthy(&self, now: Instant) -> bool {
        self.distrust_until.is_none_or(|until| now >= until)
    }
}

pub struct Scheduler {
    state: State,
    /// Stores hosts' records and standings (drain, quarantine) in order.
    host_writer: mpsc::UnboundedSender<standing::HostWrite>,
    store: Store,
    redis: Arc<RedisLink>,
    keys: Keys,
    events: Events,
    /// Where hosts' log lines are stored: a report taken from Redis waits
    /// until the lines that reached the master before it are stored.
    logs: LogFeed,
    config: SchedulerConfig,
    rx: mpsc::Receiver<Command>,
    epoch: Epoch,
    redis_ok: bool,
    last_sweep: Option<Instant>,
    /// Reports sweeps found in Redis and left for their connected hosts to
    /// deliver, with when a sweep first saw each; a sweep takes those still
    /// there after the report resend interval.
    reports_left: HashMap<AttemptRef, Instant>,
    /// What the sweeps and the reconciliation cost, for `Overview`.
    costs: recover::RecoveryCosts,
    /// What `/metrics` shows besides `costs`.
    tally: tally::Tally,
    /// The tasks in a final status, for the counts by status.
    finished: counts::Finished,
    turns: u64,
    /// The picture no longer matches the database; reload before the next turn.
    resync: bool,
    /// The turn whose commit is under way.
    in_flight: Option<commit::InFlight>,
    /// Tasks joined the queue since dispatches were last planned.
    queued_unplanned: bool,
    /// The connected hosts after the latest turn, for the API to explain
    /// why a task waits without asking the scheduler.
    placement: watch::Sender<Arc<placement::Snapshot>>,
    /// Where the end of each turn is shown to the API.
    publisher: snapshot::Publisher,
}

impl Scheduler {
    /// Loads the queue and live tasks, reconciles them with Redis, and
    /// returns the scheduler with its handle. Call [`Scheduler::run`] next.
    pub async fn start(
        store: Store,
        redis: Arc<RedisLink>,
        keys: Keys,
        events: Events,
        logs: LogFeed,
        config: SchedulerConfig,
    ) -> Result<(Scheduler, SchedulerHandle), crate::store::StoreError> {
        let (tx, rx) = mpsc::channel(config.max_batch.max(64) * 4);
        let (publisher, snapshots) = snapshot::channel(Snapshot {
            published: Instant::now(),
            overview: Overview::default(),
            hosts: vec![],
            tally: tally::Tally::default(),
            recovery: recover::RecoveryCosts::default(),
            tasks: BTreeMap::new(),
        });
        let mut state = State::default();
        state.load(
            store.pending().await?,
            store.live().await?,
            store.host_faults().await?,
        );
        state.count_stalls(store.stalls().await?);
        let finished = counts::Finished::of(&store.status_counts(&TaskStatus::TERMINAL).await?);
        for host in store.hosts().await? {
            let Ok(id) = HostId::new(host.id.clone()) else {
                continue;
            };
            state.standing.insert(id.clone(), host.standing);
            state.saw(
                &id,
                state::KnownHost {
                    slots: host.slots,
                    adapters: host.adapters,
                    capacity: host.capacity,
                },
            );
        }
        for name in &config.known_adapters {
            state.catalog.declare(name);
        }
        let host_writer = standing::spawn_writer(store.clone());
        let mut scheduler = Scheduler {
            state,
            host_writer,
            store,
            redis,
            keys,
            events,
            logs,
            config,
            rx,
            epoch: Epoch {
                known: None,
                distrust_until: None,
            },
            redis_ok: false,
            last_sweep: None,
            reports_left: HashMap::new(),
            costs: recover::RecoveryCosts::default(),
            tally: tally::Tally::default(),
            finished,
            turns: 0,
            resync: false,
            in_flight: None,
            queued_unplanned: false,
            placement: watch::Sender::new(Arc::default()),
            publisher,
        };
        tracing::info!(
            queued = scheduler.state.queue.len(),
            live = scheduler.state.live.len(),
            "task state loaded"
        );
        scheduler.reconcile().await;
        scheduler.publish();
        let placement = scheduler.placement.subscribe();
        Ok((
            scheduler,
            SchedulerHandle {
                tx,
                placement,
                snapshots,
            },
        ))
    }

    /// Runs turns until `shutdown` resolves or every handle is gone.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut commands = Vec::with_capacity(self.config.max_batch);
        let sweep_every = self.config.timers.sweep_interval;
        let mut next_sweep = Instant::now() + sweep_every.min(Duration::from_millis(500));
        let mut more_work = false;
        loop {
            if self.resync {
                self.land().await;
                self.reload().await;
            }
            let sweep_at = tokio::time::Instant::from_std(next_sweep);
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                committed = commit::landing(&mut self.in_flight), if self.in_flight.is_some() => {
                    self.landed(committed);
                    self.publish();
                    more_work |= self.more_work();
                    continue;
                }
                n = self.rx.recv_many(&mut commands, self.config.max_batch) => {
                    if n == 0 {
                        break;
                    }
                }
                _ = tokio::time::sleep_until(sweep_at) => {}
                _ = std::future::ready(()), if more_work => {}
            }
            self.turns += 1;
            let turn_started = Instant::now();
            let handled = commands.len();
            let mut cycle = Cycle::default();
            for command in commands.drain(..) {
                self.handle(command, &mut cycle);
            }
            if Instant::now() >= next_sweep {
                // The sweep judges what Redis holds (reports among it)
                // against what has committed: the turn in flight lands first.
                self.land().await;
                self.sweep(&mut cycle).await;
                self.last_sweep = Some(Instant::now());
                next_sweep = Instant::now() + sweep_every;
            }
            self.queued_unplanned = false;
            self.plan_dispatches(&mut cycle);
            self.commit(cycle).await;
            self.tally.turn(turn_started.elapsed(), handled);
            self.publish();
            more_work = self.more_work();
        }
        self.land().await;
        tracing::info!("scheduler stopped");
    }

    /// Whether a turn should follow without waiting for a command: tasks
    /// that landed after the last plan may be dispatched now.
    fn more_work(&mut self) -> bool {
        std::mem::take(&mut self.queued_unplanned) && self.dispatch_possible()
    }

    fn handle(&mut self, command: Command, cycle: &mut Cycle) {
        match command {
            Command::Submit { tasks, reply } => {
                self.submit(tasks, cycle::SubmitReply::Tasks(reply), None, cycle)
            }
            Command::CreateSweep {
                sweep,
                tasks,
                reply,
            } => self.submit(tasks, cycle::SubmitReply::Sweep(reply), Some(sweep), cycle),
            Command::Cancel { task, reply } => self.cancel(task, reply, cycle),
            Command::CancelMany { tasks } => {
                for (task, reply) in tasks {
                    self.cancel(task, reply, cycle);
                }
            }
            Command::Admit {
                hello,
                session,
                addr,
                outbox,
                contested,
                reply,
            } => {
                let admission = self.admit(*hello, session, addr, outbox, contested, cycle);
                let _ = reply.send(admission);
            }
            Command::Disconnected { host, session } => self.disconnected(&host, session),
            Command::Standing {
                host,
                change,
                reply,
            } => self.change_standing(host, change, reply, cycle),
            Command::Message {
                host,
                session,
                message,
            } => self.message(&host, session, message, cycle),
        }
    }

    /// Shows the API the state as of now.
    fn publish(&self) {
        self.publisher.publish(Snapshot {
            published: Instant::now(),
            overview: self.overview(),
            hosts: self.host_snapshots(),
            tally: self.tally.clone(),
            recovery: self.costs.clone(),
            tasks: self.finished.with_live(
                self.state.queue.len(),
                self.state.live.values().map(|live| live.status),
            ),
        });
    }

    fn overview(&self) -> Overview {
        Overview {
            queued: self.state.queue.len(),
            live: self.state.live.len(),
            hosts: self.state.hosts.len(),
            free_slots: self.state.hosts.values().map(|h| h.free_slots()).sum(),
            redis_ok: self.redis_ok,
            last_sweep_ms_ago: self.last_sweep.map(|t| t.elapsed().as_millis() as u64),
            turns: self.turns,
            sweeps: self.costs.sweeps,
            last_sweep: self.costs.last,
            slowest_sweep: self.costs.slowest,
            reconcile: self.costs.reconcile,
        }
    }

    /// Queues tasks (a sweep's trials, with the sweep) for this turn's
    /// commit, or refuses them all.
    fn submit(
        &mut self,
        mut tasks: Vec<NewTask>,
        reply: cycle::SubmitReply,
        sweep: Option<NewSweep>,
        cycle: &mut Cycle,
    ) {
        for task in &mut tasks {
            match self.admissible(task) {
                Ok(kind) => task.kind = kind,
                Err(e) => {
                    reply.fail(e);
                    return;
                }
            }
        }
        if let Some(mut sweep) = sweep {
            if let Some(first) = tasks.first() {
                sweep.kind = first.kind.clone();
            }
            cycle.sweeps.push(crate::store::SweepInsert {
                sweep,
                first: cycle.inserts.len(),
            });
        }
        cycle.submits.push(cycle::PendingSubmit {
            count: tasks.len(),
            reply,
        });
        cycle.inserts.extend(tasks);
    }

    /// Checks a submission against the adapters and hosts seen; returns its
    /// kind (the adapter's first when it named none).
    fn admissible(&self, task: &NewTask) -> Result<String, SubmitError> {
        let route = self
            .state
            .catalog
            .resolve(&task.adapter, task.version.as_ref(), &task.kind)?;
        self.state.catalog.check_params(&route, &task.params)?;
        let seen = self
            .state
            .known_hosts
            .iter()
            .map(|(id, h)| placement::SeenHost {
                id: id.as_str(),
                slots: h.slots,
                adapters: &h.adapters,
                capacity: h.capacity.as_ref(),
            });
        placement::check_request(&route, &task.resources, seen).map_err(SubmitError::TooLarge)?;
        Ok(route.kind)
    }

    fn cancel(&mut self, task: TaskId, reply: oneshot::Sender<CancelOutcome>, cycle: &mut Cycle) {
        if let Some(queued) = self.state.queue.remove(task) {
            self.state.failed_on.remove(&task);
            self.state.stalled.remove(&task);
            cycle.count(tally::Counted::Ended {
                adapter: queued.route.adapter,
                status: TaskStatus::Cancelled,
            });
            cycle.write(Write::CancelPending { task });
            cycle
                .events
                .push(self.event(task, TaskStatus::Cancelled, 0, None));
            cycle.on_commit(move |ok| {
                let _ = reply.send(if ok {
                    CancelOutcome::Cancelled
                } else {
                    CancelOutcome::Unavailable
                });
            });
            return;
        }
        let Some(live) = self.state.live.get_mut(&task) else {
            let _ = reply.send(CancelOutcome::NotLive);
            return;
        };
        let attempt = live.attempt_ref(task);
        if !live.cancel_requested {
            live.cancel_requested = true;
            cycle.write(Write::RequestCancel { attempt });
        }
        let host = live.host.clone();
        if let Some(h) = self.state.hosts.get(&host) {
            cycle.send(&host, h.session, MasterMessage::Cancel { attempt });
        }
        tracing::info!(%attempt, %host, "cancellation requested");
        cycle.on_commit(move |ok| {
            let _ = reply.send(if ok {
                CancelOutcome::CancelRequested
            } else {
                CancelOutcome::Unavailable
            });
        });
    }

    /// A status event for a task, with its current host.
    fn event(
        &self,
        task: TaskId,
        status: TaskStatus,
        attempt: u32,
        host: Option<&HostId>,
    ) -> TaskEvent {
        TaskEvent {
            task,
            kind: EventKind::Status,
            status,
            attempt,
            host: host.map(|h| h.to_string()),
            progress: None,
            metrics: None,
            error: None,
            at_ms: now_ms(),
        }
    }

    /// Queues a message for a host's connection. A host whose outbox is full
    /// is not reading its connection; it is disconnected rather than allowed
    /// to hold memory.
    fn deliver(&mut self, host: &HostId, session: SessionId, message: MasterMessage) {
        let Some(h) = self.state.hosts.get(host) else {
            return;
        };
        if h.session != session {
            return;
        }
        match h.outbox.try_send(message) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(%host, "host is not reading its connection; disconnecting it");
                self.state.hosts.remove(host);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Rebuilds the queue and the live tasks from the database.
    async fn reload(&mut self) {
        let read = (
            self.store.pending().await,
            self.store.live().await,
            self.store.status_counts(&TaskStatus::TERMINAL).await,
            self.store.host_faults().await,
            self.store.stalls().await,
        );
        match read {
            (Ok(pending), Ok(live), Ok(counts), Ok(faults), Ok(stalls)) => {
                self.state.load(pending, live, faults);
                self.state.count_stalls(stalls);
                self.finished = counts::Finished::of(&counts);
                self.resync = false;
                tracing::info!(
                    queued = self.state.queue.len(),
                    live = self.state.live.len(),
                    "task state reloaded from the database"
                );
            }
            (Err(e), ..)
            | (_, Err(e), ..)
            | (_, _, Err(e), ..)
            | (_, _, _, Err(e), _)
            | (.., Err(e)) => {
                tracing::error!(error = %e, "cannot reload task state; retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    /// Removes reports from Redis; returns the round trips made (a failed
    /// request counts: it was waited for).
    async fn forget_reports(
        &self,
        done: &[trainyard_proto::AttemptRef],
        garbage: &[String],
    ) -> u32 {
        forget_reports(&self.redis, &self.keys, done, garbage).await
    }

    /// Runs every turn: one pass over the live tasks, one over the hosts.
    fn host_snapshots(&self) -> Vec<HostSnapshot> {
        let mut by_host: std::collections::HashMap<&HostId, Vec<RunningSnapshot>> =
            std::collections::HashMap::new();
        let now_ms = trainyard_proto::now_ms();
        for (task, l) in &self.state.live {
            by_host.entry(&l.host).or_default().push(RunningSnapshot {
                task: *task,
                attempt: l.attempt,
                status: l.status,
                slot: l.slot,
                quiet_since_ms: l.quiet_since_ms(now_ms),
            });
        }
        let mut hosts: Vec<HostSnapshot> = self
            .state
            .hosts
            .iter()
            .map(|(id, h)| {
                let mut running = by_host.remove(id).unwrap_or_default();
                running.sort_by_key(|r| r.task);
                let free = h.free();
                HostSnapshot {
                    id: id.to_string(),
                    addr: h.addr.to_string(),
                    slots: h.slots,
                    free_slots: free.slots,
                    capacity: h.capacity.clone(),
                    free: FreeResources {
                        cpus: free.millicpus as f64 / 1000.0,
                        memory_bytes: free.memory_bytes,
                        gpus: free.gpus,
                    },
                    adapters: h.adapters.to_vec(),
                    agent: h.agent.clone(),
                    containment: h.containment.clone(),
                    environments: h.environments.clone(),
                    connected_for_ms: h.connected_at.elapsed().as_millis() as u64,
                    last_seen_ms_ago: h.last_seen.elapsed().as_millis() as u64,
                    running,
                    standing: self.state.standing.get(id).cloned().unwrap_or_default(),
                }
            })
            .collect();
        hosts.sort_by(|a, b| a.id.cmp(&b.id));
        hosts
    }
}

/// Removes recorded reports (and `garbage` entries of the pending set)
/// from Redis; returns the round trips made (a failed request counts: it
/// was waited for).
async fn forget_reports(
    redis: &RedisLink,
    keys: &Keys,
    done: &[trainyard_proto::AttemptRef],
    garbage: &[String],
) -> u32 {
    let mut con = match redis.connection().await {
        Ok(con) => con,
        Err(e) => {
            tracing::warn!(error = %e, count = done.len(), "could not remove recorded reports from Redis");
            return 0;
        }
    };
    match crate::recovery::leases::forget_reports(&mut con, keys, done, garbage).await {
        Ok(round_trips) => round_trips,
        Err(e) => {
            // They are picked up again by a later sweep, seen as stale, and removed then.
            tracing::warn!(error = %e, count = done.len(), "could not remove recorded reports from Redis");
            1
        }
    }
}
