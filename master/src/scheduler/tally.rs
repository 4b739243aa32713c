//! What the scheduler counts for `/metrics`: tasks submitted and ended by
//! adapter, how long tasks wait, how long turns take and how many commands
//! they carry, reports sent again and leases hosts lost.
//!
//! Plain numbers in the scheduler's own memory, bumped inside its turn with
//! no lock and published with every [`super::Snapshot`]; the API renders
//! the latest copy (`crate::api::metrics`), so a scrape never waits on a
//! turn and a turn never waits on a scrape. What depends on the turn's
//! commit is collected in the turn's [`super::cycle::Cycle`] as [`Counted`]
//! items and added only once the commit succeeded, so a turn the database
//! refused counts nothing.

use crate::model::TaskStatus;
use std::collections::BTreeMap;
use std::time::Duration;

/// Bounds (seconds) of the waiting-time histograms: queue wait and submit
/// to start, from a task dispatched at once to one that waited an hour.
pub const WAIT_SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Bounds (seconds) of the turn and sweep duration histograms.
pub const WORK_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Bounds of the commands-per-turn histogram, up to the largest
/// `master.max_batch` anyone is likely to set.
pub const BATCH_COMMANDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 16384.0,
];

/// A histogram as plain data: per-bucket counts (not cumulative), the last
/// one for values above every bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        let bucket = self.bounds.partition_point(|&b| b < value);
        self.counts[bucket] += 1;
        self.sum += value;
        self.count += 1;
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Each bucket's upper bound (`+Inf` last) with its own count, not
    /// cumulative.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
            .collect()
    }
}

/// Tasks of one adapter, counted as they moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdapterCounts {
    pub submitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Attempts that ended with the task queued again for another.
    pub retried: u64,
}

/// Something a turn counts once its commit succeeds.
#[derive(Debug, Clone, PartialEq)]
pub enum Counted {
    Submitted {
        adapter: String,
    },
    /// The task moved to `status`: COMPLETED, FAILED or CANCELLED, or
    /// PENDING again for another attempt.
    Ended {
        adapter: String,
        status: TaskStatus,
    },
    /// From entering the queue (submitted or requeued) to being dispatched.
    QueueWait(Duration),
    /// From submission to the first attempt's start on a host.
    SubmitToStart(Duration),
    /// A report of an attempt already ended or given away: acknowledged
    /// and ignored.
    StaleReport,
    /// An attempt recorded as LEASE_LOST: its host could not renew the
    /// lease and stopped it, or the sweep found the lease lapsed.
    LeaseLost,
}

/// The scheduler's counts since it started.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    pub adapters: BTreeMap<String, AdapterCounts>,
    pub queue_wait: Histogram,
    pub submit_to_start: Histogram,
    pub turn_duration: Histogram,
    /// Commands handled per turn.
    pub batch_size: Histogram,
    pub stale_reports: u64,
    pub lease_lost: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            adapters: BTreeMap::new(),
            queue_wait: Histogram::new(WAIT_SECONDS),
            submit_to_start: Histogram::new(WAIT_SECONDS),
            turn_duration: Histogram::new(WORK_SECONDS),
            batch_size: Histogram::new(BATCH_COMMANDS),
            stale_reports: 0,
            lease_lost: 0,
        }
    }
}

impl Tally {
    pub fn record(&mut self, counted: Counted) {
        match counted {
            Counted::Submitted { adapter } => self.adapter(adapter).submitted += 1,
            Counted::Ended { adapter, status } => {
                let counts = self.adapter(adapter);
                match status {
                    TaskStatus::Completed => counts.completed += 1,
                    TaskStatus::Failed => counts.failed += 1,
                    TaskStatus::Cancelled => counts.cancelled += 1,
                    TaskStatus::Pending => counts.retried += 1,
                    TaskStatus::Dispatched | TaskStatus::Running => {}
                }
            }
            Counted::QueueWait(d) => self.queue_wait.observe(d.as_secs_f64()),
            Counted::SubmitToStart(d) => self.submit_to_start.observe(d.as_secs_f64()),
            Counted::StaleReport => self.stale_reports += 1,
            Counted::LeaseLost => self.lease_lost += 1,
        }
    }

    /// One turn: how long it took and how many commands it handled.
    pub fn turn(&mut self, took: Duration, commands: usize) {
        self.turn_duration.observe(took.as_secs_f64());
        self.batch_size.observe(commands as f64);
    }

    fn adapter(&mut self, adapter: String) -> &mut AdapterCounts {
        self.adapters.entry(adapter).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_puts_each_value_in_the_first_bucket_that_holds_it() {
        let mut h = Histogram::new(&[1.0, 5.0]);
        for v in [0.5, 1.0, 3.0, 7.0] {
            h.observe(v);
        }
        assert_eq!(
            h.buckets(),
            vec![(1.0, 2), (5.0, 1), (f64::INFINITY, 1)],
            "a value equal to a bound belongs to that bound's bucket (le)"
        );
        assert_eq!((h.count(), h.sum()), (4, 11.5));
    }

    #[test]
    fn ends_are_counted_by_adapter_and_outcome() {
        let mut t = Tally::default();
        let a = || "python-trainer".to_string();
        t.record(Counted::Submitted { adapter: a() });
        t.record(Counted::Ended {
            adapter: a(),
            status: TaskStatus::Pending,
        });
        t.record(Counted::Ended {
            adapter: a(),
            status: TaskStatus::Completed,
        });
        t.record(Counted::Ended {
            adapter: "noop".into(),
            status: TaskStatus::Failed,
        });
        assert_eq!(
            t.adapters["python-trainer"],
            AdapterCounts {
                submitted: 1,
                completed: 1,
                retried: 1,
                ..Default::default()
            }
        );
        assert_eq!(t.adapters["noop"].failed, 1);
    }
}
