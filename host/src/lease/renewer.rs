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
use std::time::Duration;
use tokio::sync::watch;
use trainyard_proto::{AttemptRef, WorkerId};

/// When the master was last heard from, on the leases' clock
/// (`CLOCK_BOOTTIME`, so a suspended machine does not forget the time it
/// was away).
pub struct Contact {
    /// Nanoseconds since boot of the last frame; 0 until the first one.
    last_nanos: AtomicU64,
}

impl Contact {
    pub fn new() -> Self {
        Self {
            last_nanos: AtomicU64::new(0),
        }
    }

    /// A frame arrived from the master.
    pub fn heard(&self) {
        let nanos = Deadline::now().since_boot().as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
        self.last_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    /// When the master was last heard from; `None` if never.
    pub fn last_heard(&self) -> Option<Deadline> {
        match self.last_nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Deadline::from_boottime(Duration::from_nanos(nanos))),
        }
    }

    /// How long since the master was last heard from; `None` if never.
    pub fn silence(&self) -> Option<Duration> {
        self.last_heard()
            .map(|at| Deadline::now().since_boot().saturating_sub(at.since_boot()))
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
        // Taken before the renewal: the master's silence counts from the
        // last frame heard, not from whenever Redis happens to answer.
        let contact_until = contact_deadline(contact.last_heard(), lease_ttl, margin);
        match lease.renew(&held).await {
            Ok((renewed_until, verdicts)) => {
                // Held while Redis renews it *and* the master was heard from
                // within a lease TTL: a host cut off from the master stops its
                // trainers as surely as one cut off from Redis.
                let deadline = held_until(renewed_until, contact_until);
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

/// The latest instant a lease may be held on the strength of the master's
/// last frame: `lease_ttl - margin` after it. `None` before the first frame.
pub fn contact_deadline(
    last_heard: Option<Deadline>,
    lease_ttl: Duration,
    margin: Duration,
) -> Option<Deadline> {
    last_heard.map(|at| at.checked_add(lease_ttl.saturating_sub(margin)))
}

/// A renewed lease holds until the earlier of what Redis granted and what
/// the master's last contact allows.
pub fn held_until(renewed_until: Deadline, contact_until: Option<Deadline>) -> Deadline {
    match contact_until {
        Some(contact) => renewed_until.min(contact),
        None => renewed_until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use trainyard_proto::keys::Keys;
    use trainyard_proto::redis_link::RedisLink;
    use trainyard_proto::{HostId, Timers};
    use trainyard_testkit::RedisServer;

    #[test]
    fn the_contact_deadline_is_the_lease_budget_after_the_last_frame() {
        let heard = Deadline::from_boottime(Duration::from_secs(100));
        let ttl = Duration::from_secs(10);
        let margin = Duration::from_secs(1);
        let until = contact_deadline(Some(heard), ttl, margin).expect("heard once");
        assert_eq!(until.since_boot(), Duration::from_secs(109));
        assert_eq!(contact_deadline(None, ttl, margin), None);

        let redis = Deadline::from_boottime(Duration::from_secs(105));
        assert_eq!(held_until(redis, Some(until)), redis);
        let late_redis = Deadline::from_boottime(Duration::from_secs(112));
        assert_eq!(held_until(late_redis, Some(until)), until);
        assert_eq!(held_until(late_redis, None), late_redis);
    }

    fn redis_signal(redis: &RedisServer, signal: Signal) {
        let pid = redis.pid().expect("redis-server runs");
        kill(Pid::from_raw(pid as i32), signal).expect("signal redis-server");
    }

    /// The master falls silent, then Redis answers a renewal late: the lease
    /// still ends `lease_ttl - margin` after the master's last frame, not that
    /// long after Redis's late answer.
    #[tokio::test]
    async fn a_renewal_that_redis_answers_late_does_not_stretch_the_masters_silence() {
        let redis = RedisServer::start();
        let timers = Timers {
            lease_ttl: Duration::from_secs(10),
            lease_safety_margin: Duration::from_secs(1),
            ..Timers::default()
        };
        let budget = timers.lease_ttl - timers.effective_margin();
        let link = Arc::new(RedisLink::new(&redis.url(), Duration::from_secs(5)).unwrap());
        let host = HostId::new("renewer-test").unwrap();
        let lease = LeaseLayer::new(link, Keys::new(""), host.clone(), &timers);
        let worker = host.worker(0);
        let attempt = AttemptRef::new(7, 1);
        let crate::lease::Acquired::Granted { deadline } =
            lease.acquire(&worker, attempt).await.unwrap()
        else {
            panic!("a fresh lease is granted");
        };
        let book = Arc::new(LeaseBook::default());
        let mut handle = book.hold(attempt, worker, deadline);
        let contact = Arc::new(Contact::new());

        let before_frame = Deadline::now();
        contact.heard();
        let after_frame = Deadline::now();
        let renewer = tokio::spawn(run(
            lease,
            book.clone(),
            contact.clone(),
            Duration::from_millis(100),
            timers.lease_ttl,
            timers.effective_margin(),
        ));
        // The master stays silent; renewals go on meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Then Redis stalls, with a renewal in flight or due.
        redis_signal(&redis, Signal::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(700)).await;
        handle.state.borrow_and_update();
        redis_signal(&redis, Signal::SIGCONT);
        tokio::time::timeout(Duration::from_secs(30), handle.state.changed())
            .await
            .expect("a renewal completes once Redis answers")
            .expect("the renewer runs");
        let state = *handle.state.borrow();
        renewer.abort();

        let LeaseState::Held(held) = state else {
            panic!("the lease is still held: {state:?}");
        };
        assert!(
            held <= after_frame.checked_add(budget),
            "held {:?} past the master's last frame, more than the {budget:?} budget",
            held.since_boot() - after_frame.since_boot()
        );
        assert!(
            held >= before_frame.checked_add(budget),
            "the lease ends before its budget: {state:?}"
        );
    }
}
