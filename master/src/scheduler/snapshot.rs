//! What the scheduler shows the API, published at the end of every turn on
//! a watch channel: the counters of `/v1/health` and the connected hosts of
//! `/v1/hosts`. Readers take the latest copy without waiting on the
//! scheduler, so they answer while a turn waits on a slow Redis or database.
//!
//! The same snapshot carries the counts `/metrics` shows ([`Tally`],
//! [`RecoveryCosts`]), so a scrape never waits on a turn either.
//!
//! Ages (`last_seen_ms_ago`, `last_sweep_ms_ago`…) are stored as of the
//! publication and brought up to the moment of reading, so a snapshot read
//! while the scheduler is stuck in a long turn still tells the truth.

use super::recover::RecoveryCosts;
use super::tally::Tally;
use super::{HostSnapshot, Overview};
use crate::model::TaskStatus;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The scheduler's state as of the end of a turn.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the turn that published it ended.
    pub published: Instant,
    pub overview: Overview,
    pub hosts: Vec<HostSnapshot>,
    /// What the scheduler counted since start, for `/metrics`.
    pub tally: Tally,
    /// What its recovery sweeps cost since start, for `/metrics`.
    pub recovery: RecoveryCosts,
    /// How many tasks are in each status (see [`super::counts`]).
    pub tasks: BTreeMap<TaskStatus, u64>,
}

impl Snapshot {
    /// How long ago the scheduler last finished a turn.
    pub fn age(&self) -> Duration {
        self.published.elapsed()
    }

    /// The overview, its ages brought up to now.
    pub fn overview_now(&self) -> Overview {
        let since = millis(self.age());
        let mut o = self.overview.clone();
        o.last_sweep_ms_ago = o.last_sweep_ms_ago.map(|ago| ago + since);
        o
    }

    /// The connected hosts, their ages brought up to now.
    pub fn hosts_now(&self) -> Vec<HostSnapshot> {
        let since = millis(self.age());
        self.hosts
            .iter()
            .cloned()
            .map(|mut h| {
                h.connected_for_ms += since;
                h.last_seen_ms_ago += since;
                h
            })
            .collect()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The scheduler's end of the channel.
pub(super) struct Publisher {
    tx: watch::Sender<Arc<Snapshot>>,
}

/// The readers' end: cheap to clone; reading never waits.
#[derive(Clone)]
pub struct SnapshotReader {
    rx: watch::Receiver<Arc<Snapshot>>,
}

impl SnapshotReader {
    /// The latest snapshot, or `None` once the scheduler has stopped (or
    /// died): its last picture would only grow stale.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        if self.rx.has_changed().is_err() {
            return None;
        }
        Some(self.rx.borrow().clone())
    }
}

/// A channel holding `first` until the scheduler publishes.
pub(super) fn channel(first: Snapshot) -> (Publisher, SnapshotReader) {
    let (tx, rx) = watch::channel(Arc::new(first));
    (Publisher { tx }, SnapshotReader { rx })
}

impl Publisher {
    pub(super) fn publish(&self, snapshot: Snapshot) {
        self.tx.send_replace(Arc::new(snapshot));
    }
}
