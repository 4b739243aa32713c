//! Drain and quarantine in the scheduler: an operator's drain, undrain and
//! unquarantine, each attempt's ending counted towards its host's
//! quarantine and probe, and the writer that stores each host's record and
//! standing in order. The decisions are [`crate::standing`]'s.
//!
//! A standing is stored before an operator's change is answered, so a
//! drain the API confirmed survives a master restart or failover. One the
//! scheduler decides itself (a quarantine, a probe's verdict) is stored as
//! soon as the writer gets to it.

use super::cycle::Cycle;
use super::Scheduler;
use crate::model::{AttemptOutcome, HostStanding};
use crate::standing::{self, Ending};
use crate::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use trainyard_proto::messages::MasterMessage;
use trainyard_proto::{now_ms, AttemptRef, HostId};

/// What an operator asks of a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StandingChange {
    /// No new work; with `now`, its running attempts are stopped and
    /// requeued without using an attempt.
    Drain {
        now: bool,
    },
    Undrain,
    /// Lift its quarantine at once.
    Unquarantine,
}

/// Why a change of standing was not made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StandingError {
    #[error("no host {0} has ever connected")]
    UnknownHost(String),
    #[error("{0}")]
    Unavailable(String),
}

/// The answer to a change of standing: the host's standing once stored.
pub type StandingReply = oneshot::Sender<Result<HostStanding, StandingError>>;

/// What the host writer stores: a host's record (when it says hello or
/// reloads its adapters) or its standing. One writer keeps them in the
/// order the scheduler decided them, so a drain right after a host's first
/// hello never reaches the database before the host's row does.
pub(super) enum HostWrite {
    Record(crate::model::HostRecord),
    /// `done` hears how it went.
    Standing {
        host: String,
        standing: HostStanding,
        done: Option<oneshot::Sender<Result<bool, StoreError>>>,
    },
}

/// Starts the task that stores host records and standings one after
/// another, in the order the scheduler decided them.
pub(super) fn spawn_writer(store: Store) -> mpsc::UnboundedSender<HostWrite> {
    let (tx, mut rx) = mpsc::unbounded_channel::<HostWrite>();
    tokio::spawn(async move {
        while let Some(write) = rx.recv().await {
            match write {
                HostWrite::Record(record) => {
                    if let Err(e) = store.upsert_host(&record).await {
                        tracing::warn!(host = %record.id, error = %e, "could not record host");
                    }
                }
                HostWrite::Standing {
                    host,
                    standing,
                    done,
                } => {
                    let stored = store.set_standing(&host, &standing).await;
                    if let Err(e) = &stored {
                        tracing::warn!(%host, error = %e, "could not store the host's standing");
                    }
                    if let Some(done) = done {
                        let _ = done.send(stored);
                    }
                }
            }
        }
    });
    tx
}

impl Scheduler {
    /// Carries out an operator's change of a host's standing; answers once
    /// it is stored.
    pub(super) fn change_standing(
        &mut self,
        host: HostId,
        change: StandingChange,
        reply: StandingReply,
        cycle: &mut Cycle,
    ) {
        if !self.state.known_hosts.contains_key(&host) && !self.state.standing.contains_key(&host) {
            let _ = reply.send(Err(StandingError::UnknownHost(host.to_string())));
            return;
        }
        let standing = self.state.standing.entry(host.clone()).or_default();
        match change {
            StandingChange::Drain { .. } => {
                standing.drained_at_ms.get_or_insert_with(now_ms);
            }
            StandingChange::Undrain => standing.drained_at_ms = None,
            StandingChange::Unquarantine => {
                standing.quarantine = None;
                self.state.recent.remove(&host);
                self.state.probes.remove(&host);
            }
        }
        tracing::info!(%host, ?change, "host standing changed by an operator");
        if change == (StandingChange::Drain { now: true }) {
            self.stop_for_drain(&host, cycle);
        }
        let (done, stored) = oneshot::channel();
        let standing = self.store_standing(&host, Some(done));
        tokio::spawn(async move {
            let answer = match stored.await {
                Ok(Ok(_)) => Ok(standing),
                Ok(Err(e)) => Err(StandingError::Unavailable(e.to_string())),
                Err(_) => Err(StandingError::Unavailable(
                    "the master is shutting down".into(),
                )),
            };
            let _ = reply.send(answer);
        });
    }

    /// Tells a drained host to stop every attempt it runs for the master;
    /// each one's end requeues its task without using an attempt.
    fn stop_for_drain(&mut self, host: &HostId, cycle: &mut Cycle) {
        let session = self.state.hosts.get(host).map(|h| h.session);
        for (task, live) in self.state.live.iter_mut() {
            if &live.host != host {
                continue;
            }
            live.drained = true;
            if let Some(session) = session {
                let attempt = live.attempt_ref(*task);
                let reason = "its host was drained with --now".to_string();
                cycle.send(host, session, MasterMessage::Stop { attempt, reason });
            }
        }
    }

    /// Sends the host's current standing to the writer; returns it.
    fn store_standing(
        &self,
        host: &HostId,
        done: Option<oneshot::Sender<Result<bool, StoreError>>>,
    ) -> HostStanding {
        let standing = self.state.standing.get(host).cloned().unwrap_or_default();
        let write = HostWrite::Standing {
            host: host.to_string(),
            standing: standing.clone(),
            done,
        };
        if self.host_writer.send(write).is_err() {
            tracing::warn!(%host, "the standing writer is gone; the host's standing is not stored");
        }
        standing
    }

    /// Notes that this dispatch to a quarantined host is its probe.
    pub(super) fn note_probe(&mut self, host: &HostId, attempt: AttemptRef) {
        let quarantined = self
            .state
            .standing
            .get(host)
            .is_some_and(|s| s.quarantine.is_some());
        if quarantined {
            tracing::info!(%host, %attempt, "probe task sent to a quarantined host");
            self.state.probes.insert(host.clone(), attempt);
        }
    }

    /// Counts an attempt's end towards its host's quarantine: a probe's end
    /// decides the quarantine; any other's may start one.
    pub(super) fn attempt_ended(
        &mut self,
        host: &HostId,
        attempt: AttemptRef,
        outcome: AttemptOutcome,
        error: Option<&str>,
        ran_for: Option<Duration>,
    ) {
        let policy = &self.config.quarantine;
        let now = now_ms();
        let probe = self.state.probes.get(host) == Some(&attempt);
        if probe {
            self.state.probes.remove(host);
        }
        let state = &mut self.state;
        let standing = state.standing.entry(host.clone()).or_default();
        if let Some(q) = &standing.quarantine {
            if !probe {
                return;
            }
            standing.quarantine = standing::after_probe(q, outcome, error, now, policy);
            match &standing.quarantine {
                None => tracing::info!(%host, %attempt, "probe task completed; quarantine lifted"),
                Some(q) => {
                    tracing::warn!(%host, %attempt, outcome = outcome.as_str(), next_probe_at_ms = q.next_probe_at_ms, "probe task did not complete; the host stays quarantined")
                }
            }
            state.recent.remove(host);
            self.store_standing(host, None);
            return;
        }
        let counted = matches!(
            outcome,
            AttemptOutcome::Completed
                | AttemptOutcome::Failed
                | AttemptOutcome::HostFault
                | AttemptOutcome::LeaseLost
        );
        if !counted {
            return;
        }
        let ending = Ending::of(outcome, ran_for.unwrap_or_default(), policy);
        state
            .recent
            .entry(host.clone())
            .or_default()
            .push(ending, policy);
        let others = state
            .recent
            .iter()
            .filter(|(id, _)| *id != host)
            .map(|(_, r)| r);
        let Some(reason) = standing::verdict(&state.recent[host], others, policy) else {
            return;
        };
        tracing::warn!(%host, %reason, last_error = ?error, "host quarantined: it takes no new work but a probe task");
        standing.quarantine = Some(standing::quarantine(
            reason,
            error.map(str::to_string),
            now,
            policy,
        ));
        state.recent.remove(host);
        self.store_standing(host, None);
    }
}
