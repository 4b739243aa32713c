//! Lease renewal. Every heartbeat interval one script call renews the host's
//! heartbeat key and every lease it holds; each attempt hears the outcome
//! through its [`LeaseHandle`]: a later deadline (handed on to the trainer's
//! supervisor) or the news that the lease is lost.
//!
//! A lease holds while Redis renews it and the master has been heard from
//! within the lease TTL (less the safety margin). A host cut off from the
//! master or from Redis lets its deadlines run out; each trainer's
//! supervisor then kills it before the lease expires in Redis, so the master
//! can requeue the task without two attempts ever running at once.

use crate::lease::{LeaseLayer, Renewal};
use crate::process::Deadline;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use trainyard_proto::{AttemptRef, WorkerId};

/// When the master was last heard from.
pub struct Contact {
    origin: Instant,
    last_ms: AtomicU64,
}

impl Contact {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    /// A frame arrived from the master.
    pub fn heard(&self) {
        let ms = self.origin.elapsed().as_millis() as u64;
        self.last_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// How long since the master was last heard from; `None` if never.
    pub fn silence(&self) -> Option<Duration> {
        match self.last_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(
                self.origin
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms)),
            ),
        }
    }
}

impl Default for Contact {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a lease stands, as its attempt sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Held until this deadline unless renewed.
    Held(Deadline),
    /// Lost: the attempt must stop.
    Lost(Renewal),
}

struct Entry {
    worker: WorkerId,
    state: watch::Sender<LeaseState>,
}

/// The leases this host holds, for the renewer.
#[derive(Default)]
pub struct LeaseBook {
    entries: Mutex<HashMap<AttemptRef, Entry>>,
}

/// An attempt's view of its lease; dropping it stops the renewals.
pub struct LeaseHandle {
    book: Arc<LeaseBook>,
    attempt: AttemptRef,
    pub state: watch::Receiver<LeaseState>,
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        if let Ok(mut entries) = self.book.entries.lock() {
            entries.remove(&self.attempt);
        }
    }
}

impl LeaseBook {
    /// Registers a freshly acquired lease.
    pub fn hold(
        self: &Arc<Self>,
        attempt: AttemptRef,
        worker: WorkerId,
        deadline: Deadline,
    ) -> LeaseHandle {
        let (tx, rx) = watch::channel(LeaseState::Held(deadline));
        self.entries
            .lock()
            .expect("lease book poisoned")
            .insert(attempt, Entry { worker, state: tx });
        LeaseHandle {
            book: self.clone(),
            attempt,
            state: rx,
        }
    }

    fn snapshot(&self) -> Vec<(WorkerId, AttemptRef)> {
        self.entries
            .lock()
            .expect("lease book poisoned")
            .iter()
            .filter(|(_, e)| matches!(*e.state.borrow(), LeaseState::Held(_)))
            .map(|(a, e)| (e.worker.clone(), *a))
            .collect()
    }

    fn update(&self, attempt: AttemptRef, state: LeaseState) {
        if let Some(entry) = self
            .entries
            .lock()
            .expect("lease book poisoned")
            .get(&attempt)
        {
            let _ = entry.state.send(state);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Renews leases every `interval` until the process ends.
pub async fn run(
    lease: LeaseLayer,
    book: Arc<LeaseBook>,
    contact: Arc<Contact>,
    interval: Duration,
    lease_ttl: Duration,
    margin: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned_cut_off = false;
    loop {
        ticks.tick().await;
        let held = book.snapshot();
        let cut_off = contact.silence().is_none_or(|s| s >= lease_ttl);
        if cut_off && !held.is_empty() {
            if !warned_cut_off {
                tracing::warn!(
                    leases = held.len(),
                    "master not heard from for a lease TTL; letting leases lapse (trainers stop before they expire)"
                );
                warned_cut_off = true;
            }
            continue;
        }
        warned_cut_off = false;
        // Measured before the renewal, like the renewal's own deadline.
        let heard_for = contact
            .silence()
            .map(|silence| lease_ttl.saturating_sub(margin).saturating_sub(silence));
        match lease.renew(&held).await {
            Ok((renewed_until, verdicts)) => {
                // Held while Redis renews it *and* the master was heard from
                // within a lease TTL: a host cut off from the master stops its
                // trainers as surely as one cut off from Redis.
                let deadline = match heard_for {
                    Some(left) => renewed_until.min(Deadline::after(left)),
                    None => renewed_until,
                };
                for ((_, attempt), verdict) in held.into_iter().zip(verdicts) {
                    if verdict == Renewal::Rebuilt {
                        tracing::warn!(%attempt, "lease was missing from Redis (data lost?); rebuilt it");
                    }
                    let state = if verdict.held() {
                        LeaseState::Held(deadline)
                    } else {
                        tracing::warn!(%attempt, ?verdict, "lease lost; stopping the attempt");
                        LeaseState::Lost(verdict)
                    };
                    book.update(attempt, state);
                }
            }
            Err(e) => {
                if !held.is_empty() {
                    tracing::warn!(error = %e, leases = held.len(), "could not renew leases; trainers stop if this lasts until their deadline");
                }
            }
        }
    }
}
