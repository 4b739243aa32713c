//! How many tasks are in each status, as `/v1/health` and `/metrics` show
//! them, kept by the scheduler rather than counted by the database on each
//! poll: a `GROUP BY` over every task ever submitted costs time in
//! proportion to the table on every call.
//!
//! The scheduler is the only writer of task state, so its own picture
//! holds the counts. The live statuses are its queue and live attempts; the
//! final ones ([`Finished`]) are read from the database when the scheduler
//! loads its state (at start and after a resync), then grow with each
//! committed turn's [`Counted::Ended`]: a turn the database refused counts
//! nothing, and a doubtful one is followed by a reload.

use super::tally::Counted;
use crate::model::TaskStatus;
use std::collections::BTreeMap;

/// The tasks in each final status ([`TaskStatus::TERMINAL`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finished(BTreeMap<TaskStatus, u64>);

impl Finished {
    /// The final statuses of counts read from the database.
    pub fn of(counts: &BTreeMap<TaskStatus, u64>) -> Self {
        let count = |status| counts.get(status).copied().unwrap_or(0);
        Self(
            (TaskStatus::TERMINAL.iter())
                .map(|status| (*status, count(status)))
                .collect(),
        )
    }

    /// Takes in what a committed turn counted.
    pub fn record(&mut self, counted: &Counted) {
        if let Counted::Ended { status, .. } = counted {
            if status.is_terminal() {
                *self.0.entry(*status).or_default() += 1;
            }
        }
    }

    /// Every status's count: these final ones, `pending` queued tasks and
    /// the statuses of the live attempts.
    pub fn with_live(
        &self,
        pending: usize,
        live: impl IntoIterator<Item = TaskStatus>,
    ) -> BTreeMap<TaskStatus, u64> {
        let mut counts: BTreeMap<TaskStatus, u64> =
            TaskStatus::ALL.iter().map(|s| (*s, 0)).collect();
        counts.insert(TaskStatus::Pending, pending as u64);
        for status in live {
            *counts.entry(status).or_default() += 1;
        }
        counts.extend(&self.0);
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(status: TaskStatus) -> Counted {
        Counted::Ended {
            adapter: "ppo".into(),
            status,
        }
    }

    #[test]
    fn final_counts_start_from_the_database_and_grow_with_each_end() {
        let stored = BTreeMap::from([
            (TaskStatus::Completed, 5),
            (TaskStatus::Failed, 2),
            (TaskStatus::Running, 9),
        ]);
        let mut finished = Finished::of(&stored);
        for counted in [
            ended(TaskStatus::Completed),
            ended(TaskStatus::Cancelled),
            // A requeue ends an attempt, not the task.
            ended(TaskStatus::Pending),
            Counted::StaleReport,
        ] {
            finished.record(&counted);
        }
        let live = [
            TaskStatus::Running,
            TaskStatus::Dispatched,
            TaskStatus::Running,
        ];
        assert_eq!(
            finished.with_live(4, live),
            BTreeMap::from([
                (TaskStatus::Pending, 4),
                (TaskStatus::Dispatched, 1),
                (TaskStatus::Running, 2),
                (TaskStatus::Completed, 6),
                (TaskStatus::Failed, 2),
                (TaskStatus::Cancelled, 1),
            ])
        );
    }
}
