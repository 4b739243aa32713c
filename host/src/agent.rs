//! The host's agent: one task that owns the slots and the ledger of devices
//! and shares, starts an attempt for each dispatch, routes the master's
//! orders to running attempts, sends heartbeats (and one at once when the
//! master probes whether this connection is alive), and keeps every final
//! report until the master acknowledges it (re-sending it on every
//! reconnect and every resend interval).
//!
//! A dispatch this host cannot serve right now — no free slot, an adapter
//! or kind it does not carry, devices or a share it does not have free — is
//! rejected, which sends the task back to the queue without using up one of
//! its attempts. An attempt's devices go back to the ledger only when the
//! attempt has ended, its trainer gone.
//!
//! The connection ([`crate::link::connection`]) and the attempts talk to it
//! through one channel of [`Event`]s; it never blocks on the network.

use crate::adapters::carried::Carried;
use crate::attempt::{self, AttemptEnv, Control};
use crate::capacity::Ledger;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use trainyard_proto::messages::{
    AdapterInfo, AttemptReport, Dispatch, HostMessage, MasterMessage, ProgressUpdate,
    RunningAttempt,
};
use trainyard_proto::resources::Assignment;
use trainyard_proto::{AttemptRef, HostId};

/// What an attempt tells the agent.
#[derive(Debug)]
pub enum AttemptEvent {
    Accepted {
        attempt: AttemptRef,
        slot: u32,
    },
    Rejected {
        attempt: AttemptRef,
        slot: u32,
        reason: String,
    },
    Progress(ProgressUpdate),
    /// The attempt is over: its trainer is gone and its lease released.
    Finished {
        slot: u32,
        report: AttemptReport,
    },
}

/// What a connection's hello says of the host's present state.
#[derive(Debug)]
pub struct HelloState {
    pub running: Vec<RunningAttempt>,
    pub adapters: Vec<AdapterInfo>,
}

pub enum Event {
    /// A connection is handshaking and needs the attempts still running
    /// and the adapters carried.
    Handshaking {
        reply: oneshot::Sender<HelloState>,
    },
    /// The adapters were reloaded ([`crate::adapters::reload`]): from now on
    /// dispatches get these; running attempts keep the adapter they have.
    Adapters(Carried),
    /// The handshake completed; messages for the master go to `outbox`.
    Connected {
        session: u64,
        outbox: mpsc::Sender<HostMessage>,
    },
    Disconnected {
        session: u64,
    },
    FromMaster(MasterMessage),
    Attempt(AttemptEvent),
    /// Stop every attempt and report them; reply when all have ended.
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

struct Slot {
    attempt: AttemptRef,
    control: mpsc::Sender<Control>,
    assignment: Assignment,
    /// Whether the attempt took its lease: until then it has not started.
    leased: bool,
}

pub struct Agent {
    host: HostId,
    env: AttemptEnv,
    adapters: Carried,
    slots: Vec<Option<Slot>>,
    /// Which attempt holds which devices and share.
    ledger: Ledger,
    /// Final reports not yet acknowledged, by attempt.
    unacked: BTreeMap<AttemptRef, AttemptReport>,
    /// The newest progress of each attempt that runs, or has ended with its
    /// report not yet acknowledged. Re-sent on reconnect, before the
    /// reports: a checkpoint announced while the master was away still
    /// reaches it, and a connection lost as an attempt ended does not cost
    /// its curve the last points.
    last_progress: HashMap<AttemptRef, ProgressUpdate>,
    outbox: Option<(u64, mpsc::Sender<HostMessage>)>,
    /// The adapters the master was last told of on this connection.
    advertised: Vec<AdapterInfo>,
    events_tx: mpsc::Sender<Event>,
    events: mpsc::Receiver<Event>,
    shutting_down: Option<oneshot::Sender<()>>,
}

/// The sending side of the agent's channel.
#[derive(Clone)]
pub struct AgentHandle {
    pub tx: mpsc::Sender<Event>,
}

impl Agent {
    pub fn new(
        host: HostId,
        slots: u32,
        env: AttemptEnv,
        adapters: Carried,
        ledger: Ledger,
    ) -> (Agent, AgentHandle) {
        let (events_tx, events) = mpsc::channel(1024);
        let agent = Agent {
            host,
            env,
            adapters,
            slots: (0..slots).map(|_| None).collect(),
            ledger,
            unacked: BTreeMap::new(),
            last_progress: HashMap::new(),
            outbox: None,
            advertised: vec![],
            events_tx: events_tx.clone(),
            events,
            shutting_down: None,
        };
        (agent, AgentHandle { tx: events_tx })
    }

    /// What the host carries, for the handshake.
    pub fn adapter_infos(&self) -> Vec<AdapterInfo> {
        self.adapters.infos()
    }

    pub async fn run(mut self, heartbeat: Duration, resend: Duration) {
        let mut heartbeats = tokio::time::interval(heartbeat);
        heartbeats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resends = tokio::time::interval(resend);
        resends.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = self.events.recv() => {
                    let Some(event) = event else { break };
                    self.handle(event);
                }
                _ = heartbeats.tick() => self.heartbeat(),
                _ = resends.tick() => self.resend_reports(),
            }
            // Done once every attempt has ended and the master has every
            // report (or cannot be told: Redis keeps them for it).
            let reported = self.unacked.is_empty() || self.outbox.is_none();
            if self.shutting_down.is_some() && self.running().is_empty() && reported {
                if let Some(done) = self.shutting_down.take() {
                    let _ = done.send(());
                }
            }
        }
    }

    fn running(&self) -> Vec<RunningAttempt> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref().map(|s| RunningAttempt {
                    attempt: s.attempt,
                    slot: i as u32,
                    leased: s.leased,
                    assignment: s.assignment.clone(),
                })
            })
            .collect()
    }

    /// Tells the master the adapters carried, if they changed since it was
    /// last told. Tried again with every heartbeat until it goes out.
    fn advertise(&mut self) {
        let current = self.adapter_infos();
        if current == self.advertised {
            return;
        }
        let Some((_, outbox)) = &self.outbox else {
            return;
        };
        let message = HostMessage::Adapters {
            adapters: current.clone(),
        };
        if outbox.try_send(message).is_ok() {
            self.advertised = current;
        }
    }

    fn send(&mut self, message: HostMessage) {
        let Some((_, outbox)) = &self.outbox else {
            return;
        };
        if outbox.try_send(message).is_err() {
            // Full or closed: the connection is going away; what matters
            // (reports, running attempts) is sent again on reconnect.
            tracing::debug!("connection outbox unavailable; message dropped");
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Handshaking { reply } => {
                self.advertised = self.adapter_infos();
                let _ = reply.send(HelloState {
                    running: self.running(),
                    adapters: self.advertised.clone(),
                });
            }
            Event::Adapters(adapters) => {
                self.adapters = adapters;
                self.advertise();
            }
            Event::Connected { session, outbox } => {
                self.outbox = Some((session, outbox));
                // Adapters reloaded since the hello was written.
                self.advertise();
                self.heartbeat();
                for update in self.last_progress.values().cloned().collect::<Vec<_>>() {
                    self.send(HostMessage::Progress(update));
                }
                self.resend_reports();
            }
            Event::Disconnected { session } => {
                if self.outbox.as_ref().is_some_and(|(s, _)| *s == session) {
                    self.outbox = None;
                }
            }
            Event::FromMaster(message) => self.on_master(message),
            Event::Attempt(event) => self.on_attempt(event),
            Event::Shutdown { done } => {
                for slot in self.slots.iter().flatten() {
                    let _ = slot.control.try_send(Control::Shutdown);
                }
                self.shutting_down = Some(done);
            }
        }
    }

    fn on_master(&mut self, message: MasterMessage) {
        match message {
            MasterMessage::Dispatch(dispatch) => self.dispatch(dispatch),
            MasterMessage::Cancel { attempt } => self.control(attempt, Control::Cancel),
            MasterMessage::Stop { attempt, reason } => {
                tracing::warn!(%attempt, %reason, "master ordered this attempt stopped");
                self.control(attempt, Control::Stop { reason });
            }
            MasterMessage::ReportAck { attempt } => {
                self.last_progress.remove(&attempt);
                if self.unacked.remove(&attempt).is_some() {
                    tracing::debug!(%attempt, "report acknowledged");
                }
            }
            MasterMessage::HeartbeatAck => {}
            MasterMessage::Probe => {
                tracing::warn!("the master asks whether this connection is alive: another connection claims this host's id");
                self.heartbeat();
            }
            other => tracing::warn!(
                kind = other.kind(),
                "unexpected message from the master after the handshake"
            ),
        }
    }

    fn control(&mut self, attempt: AttemptRef, order: Control) {
        if let Some(slot) = self.slots.iter().flatten().find(|s| s.attempt == attempt) {
            let _ = slot.control.try_send(order);
        }
    }

    fn dispatch(&mut self, dispatch: Dispatch) {
        let attempt = dispatch.attempt;
        let reject = |reason: String| HostMessage::Rejected { attempt, reason };
        if self.shutting_down.is_some() {
            return self.send(reject("the host is shutting down".into()));
        }
        if self
            .slots
            .iter()
            .flatten()
            .any(|s| s.attempt.task == attempt.task)
            || self.unacked.contains_key(&attempt)
        {
            // A duplicate of something already running or done here.
            tracing::warn!(%attempt, "dispatch for a task this host already runs; ignored");
            return;
        }
        let adapter = match self
            .adapters
            .pick(&dispatch.adapter, &dispatch.version, &dispatch.kind)
        {
            Ok(adapter) => adapter.clone(),
            Err(reason) => return self.send(reject(reason)),
        };
        let Some(index) = self.slots.iter().position(Option::is_none) else {
            return self.send(reject("no free slot".into()));
        };
        let assignment = match self.ledger.assign(attempt, &dispatch.resources) {
            Ok(a) => a,
            Err(shortfall) => return self.send(reject(shortfall.to_string())),
        };
        tracing::debug!(%attempt, gpus = ?assignment.gpus, cpus = ?assignment.cpus, memory_bytes = ?assignment.memory_bytes, "resources assigned");
        let (control, control_rx) = mpsc::channel(4);
        self.slots[index] = Some(Slot {
            attempt,
            control,
            assignment: assignment.clone(),
            leased: false,
        });
        let worker = self.host.worker(index as u32);
        let env = self.env.clone();
        let events = self.events_tx.clone();
        let (attempt_events, mut from_attempt) = mpsc::channel(64);
        tokio::spawn(attempt::run(
            env,
            adapter,
            dispatch,
            worker,
            assignment,
            control_rx,
            attempt_events,
        ));
        // Forward the attempt's events into the agent's own channel.
        tokio::spawn(async move {
            while let Some(e) = from_attempt.recv().await {
                if events.send(Event::Attempt(e)).await.is_err() {
                    break;
                }
            }
        });
    }

    fn on_attempt(&mut self, event: AttemptEvent) {
        match event {
            AttemptEvent::Accepted { attempt, slot } => {
                let held = self.slots.get_mut(slot as usize).and_then(Option::as_mut);
                if let Some(s) = held.filter(|s| s.attempt == attempt) {
                    s.leased = true;
                }
                let assignment = self.ledger.held(attempt).cloned().unwrap_or_default();
                self.send(HostMessage::Accepted {
                    attempt,
                    slot,
                    assignment,
                })
            }
            AttemptEvent::Rejected {
                attempt,
                slot,
                reason,
            } => {
                self.free(slot, attempt);
                self.last_progress.remove(&attempt);
                self.send(HostMessage::Rejected { attempt, reason });
            }
            AttemptEvent::Progress(update) => {
                // Sent again on reconnect for the newest state only: the
                // earlier events of its batch are not repeated.
                let latest = ProgressUpdate {
                    earlier: vec![],
                    ..update.clone()
                };
                self.last_progress.insert(update.attempt, latest);
                self.send(HostMessage::Progress(update));
            }
            AttemptEvent::Finished { slot, report } => {
                let attempt = report.attempt;
                self.free(slot, attempt);
                self.unacked.insert(attempt, report.clone());
                self.send(HostMessage::Report(report));
            }
        }
    }

    /// The attempt has ended (its trainer is gone): its slot, devices and
    /// share are free.
    fn free(&mut self, slot: u32, attempt: AttemptRef) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.as_ref().is_some_and(|s| s.attempt == attempt) {
                *s = None;
            }
        }
        self.ledger.release(attempt);
    }

    fn heartbeat(&mut self) {
        self.advertise();
        let running = self.running();
        let environments = self
            .env
            .host
            .python
            .as_ref()
            .map(|p| p.snapshot())
            .unwrap_or_default();
        self.send(HostMessage::Heartbeat {
            running,
            environments,
        });
    }

    fn resend_reports(&mut self) {
        if self.outbox.is_none() {
            return;
        }
        for report in self.unacked.values().cloned().collect::<Vec<_>>() {
            self.env.host.metrics.report_resent();
            self.send(HostMessage::Report(report));
        }
    }
}
