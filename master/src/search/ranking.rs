//! Ranking a sweep's configurations by their metric aggregated over seeds,
//! as a pure function over the trials' outcomes.
//!
//! A configuration's score is the mean of the metric over its trials that
//! completed with it; the spread is the sample standard deviation (none
//! under two values). Configurations with at least one value are ranked,
//! best first; the others follow, unranked, in configuration order. Trials
//! still queued or running are counted, never guessed: a ranking with
//! unfinished trials is provisional and says so.

use super::spec::Direction;
use crate::model::TaskStatus;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::cmp::Ordering;
use trainyard_proto::TaskId;

/// What became of one trial, as the ranking needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialOutcome {
    pub task: TaskId,
    pub config: usize,
    pub seed: i64,
    pub status: TaskStatus,
    /// The milestone at which early stopping cancelled it.
    pub stopped_at: Option<u64>,
    /// The ranking metric, when the task completed with it.
    pub value: Option<f64>,
}

/// A trial's state as operators read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TrialState {
    Pending,
    Running,
    Completed,
    /// Completed without the sweep's metric in its result.
    MissingMetric,
    Failed,
    Cancelled,
    /// Cancelled by early stopping: not a failure.
    StoppedEarly,
}

impl TrialOutcome {
    pub fn state(&self) -> TrialState {
        match self.status {
            TaskStatus::Pending => TrialState::Pending,
            TaskStatus::Dispatched | TaskStatus::Running => TrialState::Running,
            TaskStatus::Completed if self.value.is_some() => TrialState::Completed,
            TaskStatus::Completed => TrialState::MissingMetric,
            TaskStatus::Failed => TrialState::Failed,
            TaskStatus::Cancelled if self.stopped_at.is_some() => TrialState::StoppedEarly,
            TaskStatus::Cancelled => TrialState::Cancelled,
        }
    }
}

/// One configuration's line in the ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigRank {
    /// 1 for the best; `None` while no trial has a value.
    pub rank: Option<usize>,
    pub config: usize,
    /// The swept values.
    pub params: Map<String, Value>,
    /// Trials with a value, and their mean and sample standard deviation.
    pub n: usize,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub trials: usize,
    /// Trials queued or running.
    pub unfinished: usize,
    /// Failed, or completed without the metric.
    pub failed: usize,
    pub cancelled: usize,
    pub stopped_early: usize,
    /// The highest milestone at which one of its trials was stopped.
    pub stopped_at: Option<u64>,
}

/// The whole ranking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    pub configs: Vec<ConfigRank>,
    /// The configuration ranked first, if any has a value.
    pub best: Option<usize>,
    /// Trials not finished yet: while above zero the ranking may change.
    pub unfinished: usize,
}

/// Ranks `configs` (their swept values, by index) from the trials.
pub fn rank(
    configs: &[Map<String, Value>],
    trials: &[TrialOutcome],
    direction: Direction,
) -> Ranking {
    let mut lines: Vec<ConfigRank> = configs
        .iter()
        .enumerate()
        .map(|(config, params)| summarise(config, params, trials))
        .collect();
    lines.sort_by(|a, b| match (a.mean, b.mean) {
        (Some(x), Some(y)) => better(x, y, direction).then(a.config.cmp(&b.config)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.config.cmp(&b.config),
    });
    for (i, line) in lines.iter_mut().enumerate() {
        line.rank = line.mean.map(|_| i + 1);
    }
    Ranking {
        best: lines.first().filter(|l| l.rank.is_some()).map(|l| l.config),
        unfinished: lines.iter().map(|l| l.unfinished).sum(),
        configs: lines,
    }
}

/// `Less` when `x` is the better score.
fn better(x: f64, y: f64, direction: Direction) -> Ordering {
    let order = x.partial_cmp(&y).unwrap_or(Ordering::Equal);
    match direction {
        Direction::Max => order.reverse(),
        Direction::Min => order,
    }
}

fn summarise(config: usize, params: &Map<String, Value>, trials: &[TrialOutcome]) -> ConfigRank {
    let mine: Vec<&TrialOutcome> = trials.iter().filter(|t| t.config == config).collect();
    let values: Vec<f64> = mine
        .iter()
        .filter_map(|t| t.value.filter(|v| v.is_finite()))
        .collect();
    let count = |wanted: &[TrialState]| mine.iter().filter(|t| wanted.contains(&t.state())).count();
    let (mean, std) = mean_std(&values);
    ConfigRank {
        rank: None,
        config,
        params: params.clone(),
        n: values.len(),
        mean,
        std,
        trials: mine.len(),
        unfinished: count(&[TrialState::Pending, TrialState::Running]),
        failed: count(&[TrialState::Failed, TrialState::MissingMetric]),
        cancelled: count(&[TrialState::Cancelled]),
        stopped_early: count(&[TrialState::StoppedEarly]),
        stopped_at: mine
            .iter()
            .filter(|t| t.state() == TrialState::StoppedEarly)
            .filter_map(|t| t.stopped_at)
            .max(),
    }
}

/// The mean, and the sample standard deviation (n - 1) from two values on.
pub fn mean_std(values: &[f64]) -> (Option<f64>, Option<f64>) {
    if values.is_empty() {
        return (None, None);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (Some(mean), None);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (Some(mean), Some(var.sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn configs(n: usize) -> Vec<Map<String, Value>> {
        (0..n)
            .map(|i| json!({"alpha": i}).as_object().unwrap().clone())
            .collect()
    }

    fn trial(config: usize, status: TaskStatus, value: Option<f64>) -> TrialOutcome {
        TrialOutcome {
            task: config as TaskId,
            config,
            seed: 0,
            status,
            stopped_at: None,
            value,
        }
    }

    use TaskStatus::*;

    #[test]
    fn configurations_rank_by_mean_over_seeds_with_spread() {
        let trials = [
            trial(0, Completed, Some(1.0)),
            trial(0, Completed, Some(3.0)),
            trial(1, Completed, Some(5.0)),
            trial(1, Completed, Some(4.0)),
            trial(1, Completed, Some(6.0)),
        ];
        let r = rank(&configs(2), &trials, Direction::Max);
        assert_eq!(r.best, Some(1));
        assert_eq!(r.configs[0].config, 1);
        assert_eq!(
            (r.configs[0].n, r.configs[0].mean, r.configs[0].std),
            (3, Some(5.0), Some(1.0))
        );
        assert_eq!(r.configs[1].rank, Some(2));
        assert!((r.configs[1].std.unwrap() - 2f64.sqrt()).abs() < 1e-12);
        let r = rank(&configs(2), &trials, Direction::Min);
        assert_eq!(r.best, Some(0));
    }

    #[test]
    fn unfinished_trials_are_counted_never_scored() {
        let trials = [
            trial(0, Running, None),
            trial(0, Completed, Some(2.0)),
            trial(1, Pending, None),
            trial(2, Failed, None),
            trial(2, Completed, None),
        ];
        let r = rank(&configs(3), &trials, Direction::Max);
        assert_eq!(r.unfinished, 2);
        assert_eq!(r.best, Some(0));
        let line = |c| r.configs.iter().find(|l| l.config == c).unwrap();
        assert_eq!((line(0).n, line(0).std, line(0).unfinished), (1, None, 1));
        assert_eq!(
            (line(1).rank, line(1).mean, line(1).unfinished),
            (None, None, 1)
        );
        assert_eq!(line(2).failed, 2);
        // Unranked configurations come last, in configuration order.
        assert_eq!(
            r.configs.iter().map(|l| l.config).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn stopped_early_is_its_own_state_not_a_failure() {
        let mut t = trial(0, Cancelled, None);
        t.stopped_at = Some(100);
        assert_eq!(t.state(), TrialState::StoppedEarly);
        let r = rank(&configs(1), &[t, trial(0, Cancelled, None)], Direction::Max);
        let line = &r.configs[0];
        assert_eq!(
            (
                line.stopped_early,
                line.cancelled,
                line.failed,
                line.stopped_at
            ),
            (1, 1, 0, Some(100))
        );
        assert_eq!(r.best, None);
    }

    #[test]
    fn no_trials_no_best() {
        let r = rank(&configs(2), &[], Direction::Max);
        assert_eq!(r.best, None);
        assert!(r.configs.iter().all(|l| l.rank.is_none() && l.trials == 0));
    }
}
