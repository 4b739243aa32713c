//! Hosts as the scheduler sees them: admission, connecting (with
//! reconciliation of what they say they run), leaving, and every message
//! they send after the handshake. A message is acted on only if it comes
//! from the host's current connection and names an attempt the master gave
//! that host; anything else changes no state (at most, the host is told to
//! stop an attempt that is not its to run).
//!
//! **One connection per host id.** A second connection claiming the id of
//! a connected host is not allowed to replace it on its word: the holder is
//! probed (told to send a heartbeat at once). If it answers within
//! [`Timers::liveness_probe_timeout`], the newcomer is refused and both are
//! logged — a misconfigured twin or a leaked secret cannot take over
//! another host's attempts. If it does not answer (a host that restarted
//! while the master still held its half-open connection), the old
//! connection is closed and the newcomer admitted, within its own
//! handshake.
//!
//! [`Timers::liveness_probe_timeout`]: trainyard_proto::Timers::liveness_probe_timeout

use super::cycle::Cycle;
use super::state::{Host, KnownHost, SessionId};
use super::{Admission, Scheduler};
use crate::model::{HostRecord, TaskStatus};
use crate::placement::Need;
use crate::store::Write;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use trainyard_proto::messages::{AdapterInfo, Hello, HostMessage, MasterMessage, RunningAttempt};
use trainyard_proto::resources::Assignment;
use trainyard_proto::{now_ms, AttemptRef, HostId};

/// How long a host that refused a dispatch gets no new one.
const REFUSAL_COOLDOWN: Duration = Duration::from_secs(1);

/// The connection that holds a host id, as admission sees it.
#[derive(Clone, Copy, Debug)]
struct Holder {
    session: SessionId,
    /// Its session has ended: the connection is provably gone.
    ended: bool,
    last_seen: Instant,
}

/// What becomes of a connection claiming a host id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// Nobody (live) holds the id.
    Free,
    /// A live connection holds it: ask it to answer first.
    Probe,
    /// The holder answered after the probe: it is alive; refuse the claim.
    Refuse,
    /// The holder stayed silent through the probe: it goes, the claim wins.
    Replace,
}

/// Decides a claim on a host id. `contested` is when the holder was probed,
/// on the claim's second asking.
fn claim(holder: Option<Holder>, session: SessionId, contested: Option<Instant>) -> Claim {
    match (holder, contested) {
        (None, _) => Claim::Free,
        (Some(h), _) if h.session == session || h.ended => Claim::Free,
        (Some(_), None) => Claim::Probe,
        (Some(h), Some(since)) if h.last_seen > since => Claim::Refuse,
        (Some(_), Some(_)) => Claim::Replace,
    }
}

/// What each attempt a host says it runs holds.
fn held(running: &[RunningAttempt]) -> HashMap<AttemptRef, Need> {
    running
        .iter()
        .map(|r| (r.attempt, Need::held(&r.assignment)))
        .collect()
}

impl Scheduler {
    /// Decides whether a host that proved it knows the secret may connect.
    pub(super) fn admit(
        &mut self,
        hello: Hello,
        session: SessionId,
        addr: SocketAddr,
        outbox: mpsc::Sender<MasterMessage>,
        contested: Option<Instant>,
        cycle: &mut Cycle,
    ) -> Admission {
        let id = hello.host_id.clone();
        let holder = self.state.hosts.get(&id).map(|old| Holder {
            session: old.session,
            ended: old.outbox.is_closed(),
            last_seen: old.last_seen,
        });
        let old_addr = self.state.hosts.get(&id).map(|h| h.addr);
        match claim(holder, session, contested) {
            Claim::Free => {}
            Claim::Probe => {
                let holder = holder.expect("a probe needs a holder");
                tracing::warn!(host = %id, holder = ?old_addr, claimant = %addr, "a second connection claims the id of a connected host; probing the connection that holds it");
                cycle.send(&id, holder.session, MasterMessage::Probe);
                return Admission::Probing {
                    since: Instant::now(),
                };
            }
            Claim::Refuse => {
                let from = old_addr.map(|a| a.to_string()).unwrap_or_default();
                tracing::warn!(host = %id, holder = %from, claimant = %addr, "refused a second connection claiming the id of a live host");
                return Admission::Refused(format!(
                    "host id {id} is already connected from {from} and answered a liveness probe; \
                     a second connection with the same id is refused (two hosts configured \
                     with one id, or someone else using this host's id)"
                ));
            }
            Claim::Replace => {
                tracing::warn!(host = %id, old = ?old_addr, new = %addr, "the connection holding this host id did not answer the liveness probe; closing it and admitting the new one");
            }
        }
        self.connected(hello, session, addr, outbox, cycle);
        Admission::Welcome
    }

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
            tracing::info!(host = %id, old = %old.addr, new = %addr, "host reconnected; its previous connection is closed");
        }
        self.state.saw(
            &id,
            KnownHost {
                slots: hello.slots,
                adapters: hello.adapters.clone(),
                capacity: Some(hello.capacity.clone()),
            },
        );
        let now = Instant::now();
        let host = Host {
            session,
            addr,
            outbox,
            slots: hello.slots,
            capacity: hello.capacity.clone(),
            adapters: Arc::from(hello.adapters.clone()),
            agent: hello.agent.clone(),
            containment: hello.containment.clone(),
            environments: vec![],
            assigned: self.state.assigned_to(&id),
            reported: held(&hello.running),
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
            cpus = hello.capacity.cpus,
            memory_bytes = hello.capacity.memory_bytes,
            gpus = ?hello.capacity.gpus,
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

        self.record_host(HostRecord {
            id: id.to_string(),
            slots: hello.slots,
            capacity: Some(hello.capacity),
            adapters: hello.adapters,
            agent: hello.agent,
            first_seen_ms: now,
            last_seen_ms: now,
            standing: Default::default(),
        });
    }

    /// Stores what a host carries and offers. Bookkeeping only: the host is
    /// connected whether or not this lands.
    fn record_host(&self, record: HostRecord) {
        let id = record.id.clone();
        if self
            .host_writer
            .send(super::standing::HostWrite::Record(record))
            .is_err()
        {
            tracing::warn!(host = %id, "the host writer is gone; the host is not recorded");
        }
    }

    /// A connected host reloaded its adapters: routing, the catalog and
    /// the host's record follow. Attempts it runs are not affected (each
    /// keeps the adapter it started with).
    fn adapters_changed(&mut self, id: &HostId, adapters: Vec<AdapterInfo>) {
        let Some(h) = self.state.hosts.get_mut(id) else {
            return;
        };
        h.adapters = Arc::from(adapters.clone());
        let known = KnownHost {
            slots: h.slots,
            adapters: adapters.clone(),
            capacity: Some(h.capacity.clone()),
        };
        let record = HostRecord {
            id: id.to_string(),
            slots: h.slots,
            capacity: Some(h.capacity.clone()),
            adapters,
            agent: h.agent.clone(),
            first_seen_ms: now_ms(),
            last_seen_ms: now_ms(),
            standing: Default::default(),
        };
        tracing::info!(
            host = %id,
            adapters = ?record.adapters.iter().map(|a| format!("{}@{}", a.name, a.version)).collect::<Vec<_>>(),
            "host reloaded its adapters"
        );
        self.state.saw(id, known);
        self.record_host(record);
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
            HostMessage::Heartbeat {
                running,
                environments,
            } => {
                if let Some(h) = self.state.hosts.get_mut(host) {
                    h.reported = held(&running);
                    h.environments = environments;
                }
                self.reconcile_running(host, session, &running, cycle);
                cycle.send(host, session, MasterMessage::HeartbeatAck);
            }
            HostMessage::Accepted {
                attempt,
                slot,
                assignment,
            } => {
                if let Some(h) = self.state.hosts.get_mut(host) {
                    h.reported.insert(attempt, Need::held(&assignment));
                }
                match named(self.current_view(attempt, host), true) {
                    Named::Start => self.mark_running(attempt, slot, Some(assignment), cycle),
                    Named::Assign => self.record_assignment(attempt, assignment, cycle),
                    Named::Keep => {}
                    Named::Stop => {
                        let reason = self.stop_reason(attempt);
                        cycle.send(host, session, MasterMessage::Stop { attempt, reason });
                    }
                }
            }
            HostMessage::Rejected { attempt, reason } => {
                self.rejected(host, attempt, reason, cycle)
            }
            HostMessage::Progress(update) => self.progress(host, update, cycle),
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
            // Sessions hand these to the log recorder; none reach here.
            HostMessage::Logs(_) => {}
            HostMessage::Adapters { adapters } => self.adapters_changed(host, adapters),
        }
    }

    /// Compares what a host says it runs with what the master gave it: an
    /// attempt it was given, holding its lease, that the master still has as
    /// DISPATCHED is running (its acceptance was lost); one still taking its
    /// lease has not started, and the lease decides; any other it must stop.
    fn reconcile_running(
        &mut self,
        host: &HostId,
        session: SessionId,
        running: &[RunningAttempt],
        cycle: &mut Cycle,
    ) {
        for r in running {
            match named(self.current_view(r.attempt, host), r.leased) {
                Named::Start => {
                    self.mark_running(r.attempt, r.slot, Some(r.assignment.clone()), cycle)
                }
                Named::Assign => self.record_assignment(r.attempt, r.assignment.clone(), cycle),
                Named::Keep => {}
                Named::Stop => {
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

    /// The status of `attempt` if it is its task's current attempt on
    /// `host`, and whether its assignment is still unknown.
    fn current_view(&self, attempt: AttemptRef, host: &HostId) -> Option<(TaskStatus, bool)> {
        self.state
            .current(attempt, host)
            .map(|l| (l.status, l.assignment_unknown))
    }

    /// Records the assignment of a running attempt that was started from its
    /// lease alone (a restarted master's reconciliation, or the sweep for a
    /// host that was gone), once its host names the attempt again.
    fn record_assignment(
        &mut self,
        attempt: AttemptRef,
        assignment: Assignment,
        cycle: &mut Cycle,
    ) {
        if let Some(live) = self.state.live.get_mut(&attempt.task) {
            live.assignment_unknown = false;
        }
        cycle.write_best_effort(Write::Assign {
            attempt,
            assignment,
        });
    }

    /// DISPATCHED -> RUNNING: the host holds the lease and runs the attempt
    /// with `assignment` (unknown when only its lease was seen).
    pub(super) fn mark_running(
        &mut self,
        attempt: AttemptRef,
        slot: u32,
        assignment: Option<Assignment>,
        cycle: &mut Cycle,
    ) {
        let Some(live) = self.state.live.get_mut(&attempt.task) else {
            return;
        };
        if live.attempt != attempt.attempt || live.status != TaskStatus::Dispatched {
            return;
        }
        live.status = TaskStatus::Running;
        live.assignment_unknown = assignment.is_none();
        live.slot = Some(slot);
        live.runs += 1;
        live.started = Some(Instant::now());
        live.dispatch_deadline_ms = None;
        if let Some(submitted) = live.submitted.take() {
            cycle.count(super::tally::Counted::SubmitToStart(submitted.elapsed()));
        }
        let host = live.host.clone();
        cycle.write(Write::Start {
            attempt,
            slot,
            assignment,
        });
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

    /// Notes that `attempt` failed on `host` for the host's own reasons:
    /// its task avoids that host from now on (while another can run it),
    /// and the host cools down as after a refusal.
    pub(super) fn host_faulted(&mut self, attempt: AttemptRef, host: &HostId, error: &str) {
        tracing::warn!(%host, %attempt, %error, "the host failed the attempt for reasons of its own; requeued without using an attempt");
        let hosts = self.state.failed_on.entry(attempt.task).or_default();
        if !hosts.contains(host) {
            hosts.push(host.clone());
        }
        if let Some(h) = self.state.hosts.get_mut(host) {
            h.cooldown_until = Some(Instant::now() + REFUSAL_COOLDOWN);
        }
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

/// What the master does about an attempt a host names as its own, in its
/// acceptance, hello or heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// Its acceptance was lost: it runs.
    Start,
    /// It was started from its lease alone: record the host's assignment.
    Assign,
    Keep,
    /// Not the task's current attempt on this host: the host must stop it.
    Stop,
}

/// `current`: the attempt's status and whether its assignment is unknown,
/// if it is its task's current attempt on that host; `leased`: whether the
/// host holds its lease (one still taking it has not started, and the lease
/// decides).
fn named(current: Option<(TaskStatus, bool)>, leased: bool) -> Named {
    match current {
        Some((TaskStatus::Dispatched, _)) if leased => Named::Start,
        Some((TaskStatus::Running, true)) => Named::Assign,
        Some(_) => Named::Keep,
        None => Named::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_started_from_its_lease_gets_its_assignment_when_its_host_names_it() {
        use TaskStatus::{Dispatched, Running};
        assert_eq!(named(Some((Dispatched, false)), true), Named::Start);
        assert_eq!(named(Some((Dispatched, false)), false), Named::Keep);
        assert_eq!(named(Some((Running, true)), true), Named::Assign);
        assert_eq!(named(Some((Running, false)), true), Named::Keep);
        assert_eq!(named(None, true), Named::Stop);
    }

    fn holder(last_seen: Instant) -> Option<Holder> {
        Some(Holder {
            session: 1,
            ended: false,
            last_seen,
        })
    }

    #[test]
    fn a_claim_on_a_live_hosts_id_is_probed_then_refused_if_the_holder_answers() {
        let t0 = Instant::now();
        let probed = t0 + Duration::from_millis(10);
        assert_eq!(claim(None, 2, None), Claim::Free);
        assert_eq!(claim(holder(t0), 2, None), Claim::Probe);
        // It answered after the probe: alive, the claimant is refused.
        let answered = probed + Duration::from_millis(5);
        assert_eq!(claim(holder(answered), 2, Some(probed)), Claim::Refuse);
        // Silent since before the probe: its place goes to the claimant.
        assert_eq!(claim(holder(t0), 2, Some(probed)), Claim::Replace);
    }

    #[test]
    fn a_holder_whose_session_ended_is_no_obstacle() {
        let gone = Some(Holder {
            session: 1,
            ended: true,
            last_seen: Instant::now(),
        });
        assert_eq!(claim(gone, 2, None), Claim::Free);
        assert_eq!(claim(holder(Instant::now()), 1, None), Claim::Free);
    }
}
