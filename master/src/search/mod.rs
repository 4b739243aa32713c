//! Sweeps: hyperparameter searches over seeds, their ranking, and early
//! stopping. (Not the recovery sweep of [`crate::recovery::leases`]: that one looks for
//! lapsed leases.)
//!
//! A sweep is a record with its trials; each trial is an ordinary task
//! (one configuration, one seed), created with the sweep in one
//! transaction. Everything about a sweep's state is read from its trials'
//! tasks, so the scheduler, recovery and cancellation treat trials like any
//! task.
//!
//! - [`spec`]: the search spec and its expansion into trials (pure).
//! - [`ranking`]: configurations ranked by their metric over seeds (pure).
//! - [`halving`]: the early-stopping decision (pure).
//! - [`stopping`]: early stopping at work: milestones recorded from the
//!   trials' progress, and the trials [`halving`] picks stopped.
//! - [`supervisor`]: the master's loop that feeds [`stopping`] the task
//!   events and finishes the cancellation of cancelled sweeps.

pub mod halving;
pub mod ranking;
pub mod spec;
pub mod stopping;
pub mod supervisor;

use crate::model::{ProgressView, ResultView, TaskStatus};
use ranking::{Ranking, TrialOutcome, TrialState};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use spec::Direction;
use std::collections::BTreeMap;
use trainyard_proto::TaskId;

pub type SweepId = u64;

/// A sweep as created, inserted with its trials' tasks in one transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSweep {
    /// The team it and its trials belong to.
    pub team: String,
    pub name: Option<String>,
    pub adapter: String,
    /// The trials' kind, as the scheduler resolved it.
    pub kind: String,
    /// The accepted spec, sweep seed included (JSON).
    pub spec: String,
    /// The swept values of each configuration (a JSON list of objects).
    pub configs: String,
    pub metric: String,
    pub direction: Direction,
    /// (configuration, seed) of each trial, in the order of its task.
    pub trials: Vec<(usize, i64)>,
}

/// A stored sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub id: SweepId,
    /// The team it belongs to, as do its trials.
    #[serde(default)]
    pub team: String,
    pub name: Option<String>,
    pub adapter: String,
    pub kind: String,
    pub metric: String,
    pub direction: Direction,
    pub created_at_ms: i64,
    pub cancelled_at_ms: Option<i64>,
}

/// A trial with its task's state, as the store reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialRow {
    pub task: TaskId,
    pub config: usize,
    pub seed: i64,
    pub stopped_at: Option<u64>,
    pub status: TaskStatus,
    pub result: Option<ResultView>,
    pub progress: Option<ProgressView>,
}

/// Where a sweep is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SweepState {
    /// Some trial is queued or running.
    Running,
    /// Every trial ended.
    Finished,
    /// An operator cancelled it (trials may still be stopping).
    Cancelled,
}

/// A sweep in a listing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    #[serde(flatten)]
    pub sweep: SweepRecord,
    pub state: SweepState,
    pub trial_count: usize,
    /// Trials by state.
    pub counts: BTreeMap<TrialState, usize>,
}

/// One trial as `GET /v1/sweeps/{id}` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialView {
    pub task: TaskId,
    pub config: usize,
    pub seed: i64,
    pub state: TrialState,
    /// The sweep's metric, once completed with it.
    pub value: Option<f64>,
    /// Episodes reported so far.
    pub episode: Option<u64>,
    pub stopped_at: Option<u64>,
}

/// A sweep with its spec, ranking and trials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepDetail {
    #[serde(flatten)]
    pub summary: SweepSummary,
    pub spec: Value,
    pub ranking: Ranking,
    pub trials: Vec<TrialView>,
}

impl TrialRow {
    fn outcome(&self, metric: &str) -> TrialOutcome {
        TrialOutcome {
            task: self.task,
            config: self.config,
            seed: self.seed,
            status: self.status,
            stopped_at: self.stopped_at,
            value: match self.status {
                TaskStatus::Completed => self
                    .result
                    .as_ref()
                    .and_then(|r| r.metrics.get(metric).copied()),
                _ => None,
            },
        }
    }
}

/// The listing line of a sweep.
pub fn summary(sweep: SweepRecord, trials: &[TrialRow]) -> SweepSummary {
    let mut counts = BTreeMap::new();
    for t in trials {
        *counts.entry(t.outcome(&sweep.metric).state()).or_insert(0) += 1;
    }
    let unfinished = trials.iter().any(|t| !t.status.is_terminal());
    let state = match (sweep.cancelled_at_ms, unfinished) {
        (Some(_), _) => SweepState::Cancelled,
        (None, true) => SweepState::Running,
        (None, false) => SweepState::Finished,
    };
    SweepSummary {
        sweep,
        state,
        trial_count: trials.len(),
        counts,
    }
}

/// The full view of a sweep: ranking over seeds and every trial.
pub fn detail(
    sweep: SweepRecord,
    spec: Value,
    configs: &[Map<String, Value>],
    trials: &[TrialRow],
) -> SweepDetail {
    let outcomes: Vec<TrialOutcome> = trials.iter().map(|t| t.outcome(&sweep.metric)).collect();
    let ranking = ranking::rank(configs, &outcomes, sweep.direction);
    let views = trials
        .iter()
        .zip(&outcomes)
        .map(|(t, o)| TrialView {
            task: t.task,
            config: t.config,
            seed: t.seed,
            state: o.state(),
            value: o.value,
            episode: t.progress.as_ref().and_then(|p| p.episode),
            stopped_at: t.stopped_at,
        })
        .collect();
    SweepDetail {
        summary: summary(sweep, trials),
        spec,
        ranking,
        trials: views,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sweep_reads_back_as_the_api_wrote_it() {
        let record = SweepRecord {
            id: 3,
            team: "default".into(),
            name: Some("lr".into()),
            adapter: "python-trainer".into(),
            kind: "q-learning".into(),
            metric: "mean_return".into(),
            direction: Direction::Max,
            created_at_ms: 1,
            cancelled_at_ms: None,
        };
        let result = ResultView {
            metrics: [("mean_return".to_string(), 0.5)].into(),
            ..ResultView::default()
        };
        let trials = [
            TrialRow {
                task: 10,
                config: 0,
                seed: 0,
                stopped_at: None,
                status: TaskStatus::Completed,
                result: Some(result),
                progress: None,
            },
            TrialRow {
                task: 11,
                config: 1,
                seed: 0,
                stopped_at: Some(40),
                status: TaskStatus::Cancelled,
                result: None,
                progress: None,
            },
        ];
        let configs =
            [json!({"lr": 0.1}), json!({"lr": 0.3})].map(|c| c.as_object().unwrap().clone());
        let d = detail(record, json!({"sweep_seed": 7}), &configs, &trials);
        assert_eq!(d.summary.state, SweepState::Finished);
        assert_eq!(d.ranking.best, Some(0));
        assert_eq!(d.trials[1].state, TrialState::StoppedEarly);
        let text = serde_json::to_string(&d).unwrap();
        let back: SweepDetail = serde_json::from_str(&text).unwrap();
        assert_eq!(back, d);
        let listed = serde_json::to_string(&d.summary).unwrap();
        assert_eq!(
            serde_json::from_str::<SweepSummary>(&listed).unwrap(),
            d.summary
        );
    }
}
