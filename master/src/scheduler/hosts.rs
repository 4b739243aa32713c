//! Hosts as the scheduler sees them: connecting (with reconciliation of what
//! they say they run), leaving, and every message they send after the
//! handshake. A message is acted on only if it comes from the host's current
//! connection and names an attempt the master gave that host; anything else
//! changes no state (at most, the host is told to stop an attempt that is not
//! its to run).

use super::cycle::Cycle;
use super::state::{Host, SessionId};
use super::Scheduler;
use crate::events::{EventKind, TaskEvent};
use crate::model::{HostRecord, ProgressView, StoredCheckpoint, TaskStatus};
use crate::store::Write;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use trainyard_proto::messages::{Hello, HostMessage, MasterMessage, RunningAttempt};
use trainyard_proto::{now_ms, AttemptRef, HostId};

/// How long a host that refused a dispatch gets no new one.
const REFUSAL_COOLDOWN: Duration = Duration::from_secs(1);

impl Scheduler {
    pub(super) fn connected(
        &mut self,
        hello: Hello,
        session: SessionId,
        addr: SocketAddr,
        outbox: mpsc::Sender<MasterMessage>,
        cycle: &mut Cycle,
    ) {
        let id = hello.host_id.clone();
        if let Some(old) = self.state.hosts.remove(&id) {
            // Dropping the old outbox ends the old connection.
            tracing::warn!(host = %id, old = %old.addr, new = %addr, "host reconnected; replacing its previous connection");
        }
        self.state.learn_adapters(&hello.adapters);
        let now = Instant::now();
        let host = Host {
            session,
            addr,
            outbox,
            slots: hello.slots,
            adapters: hello.adapters.clone(),
            agent: hello.agent.clone(),
            assigned: self.state.assigned_to(&id),
            reported: hello.running.iter().map(|r| r.attempt).collect(),
            connected_at: now,
            last_seen: now,
            cooldown_until: None,
            dispatched: 0,
        };
        self.state.hosts.insert(id.clone(), host);
        tracing::info!(
            host = %id,
            %addr,
            slots = hello.slots,
            adapters = ?hello.adapters.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
            running = hello.running.len(),
            "host connected"
        );

        self.reconcile_running(&id, session, &hello.running, cycle);
        if let Some(stale) = self.state.stale_on_connect.remove(&id) {
            for attempt in stale {
                if self.state.current(attempt, &id).is_none() {
                    let reason = self.stop_reason(attempt);
                    cycle.send(&id, session, MasterMessage::Stop { attempt, reason });
                }
            }
        }
        // A dispatch to this host that it does not list was lost with its old
        // connection (or it finished and reported while the master was down).
        // Let the next sweep decide at once: it looks for a report and for the
        // lease before giving the dispatch up.
        let running: HashSet<AttemptRef> = hello.running.iter().map(|r| r.attempt).collect();
        let now = now_ms();
        for (task, live) in self.state.live.iter_mut() {
            if live.host == id
                && live.status == TaskStatus::Dispatched
                && !running.contains(&live.attempt_ref(*task))
            {
                live.dispatch_deadline_ms = Some(now);
            }
        }

        let record = HostRecord {
            id: id.to_string(),
            slots: hello.slots,
            adapters: hello.adapters,
            agent: hello.agent,
            first_seen_ms: now,
            last_seen_ms: now,
        };
        let store = self.store.clone();
        // Bookkeeping only: the host is connected whether or not this lands.
        tokio::spawn(async move {
            if let Err(e) = store.upsert_host(&record).await {
                tracing::warn!(host = %record.id, error = %e, "could not record host");
            }
        });
    }

    pub(super) fn disconnected(&mut self, host: &HostId, session: SessionId) {
        if self
            .state
            .hosts
            .get(host)
            .is_some_and(|h| h.session == session)
        {
            self.state.hosts.remove(host);
            let live = self.state.live.values().filter(|l| &l.host == host).count();
            tracing::info!(%host, live, "host disconnected; its attempts stay until their leases lapse");
        }
    }

    pub(super) fn message(
        &mut self,
        host: &HostId,
        session: SessionId,
        message: HostMessage,
        cycle: &mut Cycle,
    ) {
        let Some(h) = self.state.hosts.get_mut(host) else {
            return;
        };
        if h.session != session {
            tracing::debug!(%host, kind = message.kind(), "message from a replaced connection ignored");
            return;
        }
        h.last_seen = Instant::now();
        match message {
            HostMessage::Heartbeat { running } => {
                if let Some(h) = self.state.hosts.get_mut(host) {
                    h.reported = running.iter().map(|r| r.attempt).collect();
                }
                self.reconcile_running(host, session, &running, cycle);
                cycle.send(host, session, MasterMessage::HeartbeatAck);
            }
            HostMessage::Accepted { attempt, slot } => {
                if let Some(h) = self.state.hosts.get_mut(host) {
                    h.reported.insert(attempt);
                }
                match self.state.current(attempt, host).map(|l| l.status) {
                    Some(TaskStatus::Dispatched) => self.mark_running(attempt, slot, cycle),
                    Some(_) => {}
                    None => {
                        let reason = self.stop_reason(attempt);
                        cycle.send(host, session, MasterMessage::Stop { attempt, reason });
                    }
                }
            }
            HostMessage::Rejected { attempt, reason } => {
                self.rejected(host, attempt, reason, cycle)
            }
            HostMessage::Progress(update) => {
                let Some(live) = self.state.current(update.attempt, host) else {
                    return;
                };
                let (status, attempt) = (live.status, live.attempt);
                let view = ProgressView::from_progress(attempt, &update.progress, now_ms());
                let checkpoint = update.checkpoint.map(|checkpoint| StoredCheckpoint {
                    attempt,
                    checkpoint,
                });
                cycle.events.push(TaskEvent {
                    kind: EventKind::Progress,
                    progress: Some(view.clone()),
                    ..self.event(update.attempt.task, status, attempt, Some(host))
                });
                cycle.progress(update.attempt, view, checkpoint);
            }
            HostMessage::Report(report) => {
                if &report.host != host {
                    tracing::warn!(%host, claimed = %report.host, attempt = %report.attempt, "host sent a report in another host's name; ignored");
                    return;
                }
                self.report(report, Some((host.clone(), session)), cycle);
            }
            HostMessage::Hello(_) => {
                tracing::warn!(%host, "second hello on a connection; ignored");
            }
        }
    }

    /// Compares what a host says it runs with what the master gave it: an
    /// attempt it was given but the master still has as DISPATCHED is
    /// running (its acceptance was lost); any other it must stop.
    fn reconcile_running(
        &mut self,
        host: &HostId,
        session: SessionId,
        running: &[RunningAttempt],
        cycle: &mut Cycle,
    ) {
        for r in running {
            match self.state.current(r.attempt, host).map(|l| l.status) {
                Some(TaskStatus::Dispatched) => self.mark_running(r.attempt, r.slot, cycle),
                Some(_) => {}
                None => {
                    let reason = self.stop_reason(r.attempt);
                    tracing::info!(%host, attempt = %r.attempt, %reason, "telling host to stop an attempt that is not its to run");
                    cycle.send(
                        host,
                        session,
                        MasterMessage::Stop {
                            attempt: r.attempt,
                            reason,
                        },
                    );
                }
            }
        }
    }

    /// DISPATCHED -> RUNNING: the host holds the lease and runs the attempt.
    pub(super) fn mark_running(&mut self, attempt: AttemptRef, slot: u32, cycle: &mut Cycle) {
        let Some(live) = self.state.live.get_mut(&attempt.task) else {
            return;
        };
        if live.attempt != attempt.attempt || live.status != TaskStatus::Dispatched {
            return;
        }
        live.status = TaskStatus::Running;
        live.slot = Some(slot);
        live.runs += 1;
        live.dispatch_deadline_ms = None;
        let host = live.host.clone();
        cycle.write(Write::Start { attempt, slot });
        cycle.events.push(self.event(
            attempt.task,
            TaskStatus::Running,
            attempt.attempt,
            Some(&host),
        ));
        tracing::debug!(%attempt, %host, slot, "attempt running");
    }

    fn rejected(&mut self, host: &HostId, attempt: AttemptRef, reason: String, cycle: &mut Cycle) {
        let Some(live) = self.state.current(attempt, host).cloned() else {
            return;
        };
        if live.status != TaskStatus::Dispatched {
            tracing::warn!(%host, %attempt, "host rejected an attempt it had accepted; ignored");
            return;
        }
        tracing::warn!(%host, %attempt, %reason, "host refused the dispatch; requeueing");
        if let Some(h) = self.state.hosts.get_mut(host) {
            h.cooldown_until = Some(Instant::now() + REFUSAL_COOLDOWN);
        }
        let then = crate::recovery::after_unsuccessful(&live.view(), false, &reason);
        self.settle(
            attempt,
            crate::model::AttemptOutcome::Rejected,
            Some(format!("host {host} refused it: {reason}")),
            None,
            then.into(),
            cycle,
        );
    }

    /// Why a host must stop an attempt, for its log.
    pub(super) fn stop_reason(&self, attempt: AttemptRef) -> String {
        match self.state.live.get(&attempt.task) {
            Some(live) if live.attempt > attempt.attempt => {
                format!(
                    "superseded by attempt {} on host {}",
                    live.attempt, live.host
                )
            }
            Some(live) => format!(
                "the task's live attempt is {} on host {}",
                live.attempt, live.host
            ),
            None => {
                "the task is no longer running here (it finished, was cancelled, or was requeued)"
                    .into()
            }
        }
    }
}
