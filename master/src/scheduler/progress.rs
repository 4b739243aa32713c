//! Taking in an attempt's progress: every event of an update goes out as a
//! task event and is stored as a point of the history with the turn's
//! writes; the task row keeps the newest, and a checkpoint it carries.
//!
//! A report carries its attempt's last progress too. Over the connection
//! that progress came ahead of the report and has been taken in already;
//! a report taken from Redis (its host gone) may bring one the master never
//! heard, which is taken in before the report ends the task — so a task
//! never ends with older progress than its trainer last reported.

use super::cycle::Cycle;
use super::Scheduler;
use crate::events::{EventKind, TaskEvent};
use crate::history;
use crate::model::{ProgressView, StoredCheckpoint};
use trainyard_proto::messages::{AttemptReport, ProgressUpdate, MAX_PROGRESS_BATCH};
use trainyard_proto::{now_ms, HostId};

/// Whether a report's final progress is news: the master has not heard it
/// as the attempt's newest progress.
pub fn final_progress_missed(heard: Option<&ProgressView>, report: &AttemptReport) -> bool {
    match &report.progress {
        None => false,
        Some(last) => !heard.is_some_and(|h| h.shows(last)),
    }
}

impl Scheduler {
    /// Takes in a progress update of `host`'s current attempt; one of any
    /// other attempt changes nothing.
    pub(super) fn progress(&mut self, host: &HostId, update: ProgressUpdate, cycle: &mut Cycle) {
        let Some(live) = self.state.current(update.attempt, host) else {
            return;
        };
        let (status, attempt) = (live.status, live.attempt);
        let task = update.attempt.task;
        let now = now_ms();
        let view = ProgressView::from_progress(attempt, &update.progress, now);
        let checkpoint = update.checkpoint.map(|checkpoint| StoredCheckpoint {
            attempt,
            checkpoint,
        });
        // Every event of the batch goes out and into the history; the task
        // row keeps the newest.
        let skip = update.earlier.len().saturating_sub(MAX_PROGRESS_BATCH - 1);
        let earlier = update.earlier.iter().skip(skip);
        // A restated event was heard already: not a point again.
        let newest = (!update.restated).then_some(&update.progress);
        for p in earlier.chain(newest) {
            let shown = ProgressView::from_progress(attempt, p, now);
            cycle.points.push(history::point(task, &shown));
            cycle.events.push(TaskEvent {
                kind: EventKind::Progress,
                progress: Some(shown),
                ..self.event(task, status, attempt, Some(host))
            });
        }
        if let Some(live) = self.state.live.get_mut(&task) {
            live.last_progress = Some(view.clone());
        }
        cycle.progress(update.attempt, view, checkpoint);
    }

    /// Takes in the final progress `report` carries if the master missed
    /// it. Call before the report ends the attempt.
    pub(super) fn final_progress(&mut self, report: &AttemptReport, cycle: &mut Cycle) {
        let Some(live) = self.state.current(report.attempt, &report.host) else {
            return;
        };
        if !final_progress_missed(live.last_progress.as_ref(), report) {
            return;
        }
        if let Some(progress) = report.progress.clone() {
            tracing::debug!(attempt = %report.attempt, "the report brings progress the master had not heard");
            let update = ProgressUpdate {
                attempt: report.attempt,
                progress,
                checkpoint: None,
                earlier: vec![],
                restated: false,
            };
            self.progress(&report.host, update, cycle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::messages::{Outcome, Progress};
    use trainyard_proto::AttemptRef;

    fn episode(n: u64) -> Progress {
        Progress {
            episode: Some(n),
            ..Progress::default()
        }
    }

    fn report(progress: Option<Progress>) -> AttemptReport {
        AttemptReport {
            attempt: AttemptRef::new(1, 1),
            host: HostId::new("h1").unwrap(),
            slot: 0,
            outcome: Outcome::Cancelled,
            assignment: Default::default(),
            duration_ms: 5,
            finished_at_ms: 0,
            progress,
        }
    }

    #[test]
    fn a_reports_final_progress_is_taken_in_only_when_the_master_missed_it() {
        let heard = ProgressView::from_progress(1, &episode(40), 7);
        assert!(!final_progress_missed(
            Some(&heard),
            &report(Some(episode(40)))
        ));
        assert!(final_progress_missed(
            Some(&heard),
            &report(Some(episode(50)))
        ));
        assert!(final_progress_missed(None, &report(Some(episode(1)))));
        assert!(!final_progress_missed(Some(&heard), &report(None)));
        assert!(!final_progress_missed(None, &report(None)));
    }
}
