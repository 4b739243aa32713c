//! Early stopping by successive halving, as a pure function over the
//! trials' recorded curves.
//!
//! At each milestone (a number of episodes), the configurations still in
//! the race are compared by the mean, over their trials, of the signal each
//! trial had when it reached the milestone; the best `keep` fraction
//! (rounded up, at least one) go on, and every unfinished trial of the
//! others is stopped. A milestone is decided once every configuration still
//! in the race has a value there, or has no unfinished trial left (it ended
//! short of the milestone and is not judged there). Decisions are final:
//! the caller passes back those made before, and a milestone decided once
//! is never decided again, whatever values arrive later.

use super::spec::{Direction, EarlyStopping};
use std::collections::{BTreeMap, BTreeSet};
use trainyard_proto::TaskId;

/// The most milestones a spec may name.
pub const MAX_MILESTONES: usize = 16;

/// Checks the early-stopping part of a spec.
pub fn check(es: &EarlyStopping) -> Result<(), String> {
    if es.milestones.is_empty() || es.milestones.len() > MAX_MILESTONES {
        return Err(format!(
            "\"early_stopping.milestones\" needs 1 to {MAX_MILESTONES} milestones"
        ));
    }
    if es.milestones[0] == 0 || es.milestones.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "\"early_stopping.milestones\" must be positive and ascending, got {:?}",
            es.milestones
        ));
    }
    if !(es.keep > 0.0 && es.keep < 1.0) {
        return Err(format!(
            "\"early_stopping.keep\" is the fraction kept at each milestone, between 0 and 1 \
             (exclusive), got {}",
            es.keep
        ));
    }
    Ok(())
}

/// One trial's curve, as far as the decision needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialCurve {
    pub task: TaskId,
    pub config: usize,
    /// Queued or running: it can still be stopped, or reach a milestone.
    pub unfinished: bool,
    /// The signal at each milestone it reached.
    pub at: BTreeMap<u64, f64>,
}

/// The configurations stopped at each decided milestone.
pub type Decisions = BTreeMap<u64, BTreeSet<usize>>;

/// A trial to stop, and the milestone that stopped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    pub task: TaskId,
    pub milestone: u64,
}

/// Decides the milestones that can be decided now, after those in
/// `decided`. Returns the new decisions (to pass back next time) and the
/// trials to stop: every unfinished trial of a configuration stopped at a
/// milestone, this time or before (a trial requeued after a stop is
/// stopped again).
pub fn decide(
    es: &EarlyStopping,
    direction: Direction,
    configs: usize,
    trials: &[TrialCurve],
    decided: &Decisions,
) -> (Decisions, Vec<Stop>) {
    let mut racing: BTreeSet<usize> = (0..configs).collect();
    let mut new = Decisions::new();
    let mut stopped_at: BTreeMap<usize, u64> = BTreeMap::new();
    for &milestone in &es.milestones {
        let out = match decided.get(&milestone) {
            Some(out) => out.clone(),
            None => match judge(es.keep, direction, milestone, &racing, trials) {
                Some(out) => {
                    new.insert(milestone, out.clone());
                    out
                }
                None => break,
            },
        };
        for c in &out {
            racing.remove(c);
            stopped_at.entry(*c).or_insert(milestone);
        }
    }
    let stops = trials
        .iter()
        .filter(|t| t.unfinished)
        .filter_map(|t| {
            stopped_at.get(&t.config).map(|&milestone| Stop {
                task: t.task,
                milestone,
            })
        })
        .collect();
    (new, stops)
}

/// The configurations to stop at `milestone`, or `None` while it cannot be
/// decided yet.
fn judge(
    keep: f64,
    direction: Direction,
    milestone: u64,
    racing: &BTreeSet<usize>,
    trials: &[TrialCurve],
) -> Option<BTreeSet<usize>> {
    let mut scored: Vec<(usize, f64)> = Vec::new();
    for &config in racing {
        let mine = trials.iter().filter(|t| t.config == config);
        let values: Vec<f64> = mine
            .clone()
            .filter_map(|t| t.at.get(&milestone).copied())
            .collect();
        if values.is_empty() {
            if mine.clone().any(|t| t.unfinished) {
                return None;
            }
            continue;
        }
        scored.push((config, values.iter().sum::<f64>() / values.len() as f64));
    }
    scored.sort_by(|a, b| {
        let order = a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal);
        match direction {
            Direction::Max => order.reverse(),
            Direction::Min => order,
        }
        .then(a.0.cmp(&b.0))
    });
    let kept = ((scored.len() as f64 * keep).ceil() as usize).max(1);
    Some(scored.iter().skip(kept).map(|(c, _)| *c).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es(milestones: &[u64]) -> EarlyStopping {
        EarlyStopping {
            milestones: milestones.to_vec(),
            keep: 0.5,
        }
    }

    /// A trial with its curve: the signal per milestone reached.
    fn curve(task: TaskId, config: usize, unfinished: bool, at: &[(u64, f64)]) -> TrialCurve {
        TrialCurve {
            task,
            config,
            unfinished,
            at: at.iter().copied().collect(),
        }
    }

    /// Recorded from four q-learning configurations (mean return over the
    /// episodes before each milestone), two seeds each: the learning rate
    /// decides how fast they learn.
    fn recorded() -> Vec<TrialCurve> {
        vec![
            curve(1, 0, true, &[(100, 0.05), (300, 0.12)]),
            curve(2, 0, true, &[(100, 0.03)]),
            curve(3, 1, true, &[(100, 0.41), (300, 0.78)]),
            curve(4, 1, true, &[(100, 0.37), (300, 0.81)]),
            curve(5, 2, true, &[(100, 0.22), (300, 0.40)]),
            curve(6, 2, true, &[(100, 0.25), (300, 0.52)]),
            curve(7, 3, true, &[(100, 0.31), (300, 0.70)]),
            curve(8, 3, true, &[(100, 0.18), (300, 0.66)]),
        ]
    }

    #[test]
    fn the_bottom_half_stops_at_each_milestone() {
        let (decisions, stops) = decide(
            &es(&[100, 300]),
            Direction::Max,
            4,
            &recorded(),
            &Decisions::new(),
        );
        // At 100: means 0.04, 0.39, 0.235, 0.245 -> configs 0 and 2 stop.
        // At 300: configs 1 (0.795) and 3 (0.68) remain -> 3 stops.
        assert_eq!(decisions[&100], BTreeSet::from([0, 2]));
        assert_eq!(decisions[&300], BTreeSet::from([3]));
        let stopped: Vec<(TaskId, u64)> = stops.iter().map(|s| (s.task, s.milestone)).collect();
        assert_eq!(
            stopped,
            [(1, 100), (2, 100), (5, 100), (6, 100), (7, 300), (8, 300)]
        );
    }

    #[test]
    fn a_milestone_waits_for_every_racing_configuration() {
        let mut trials = recorded();
        // Config 3 has not reached 100 on any trial yet.
        trials[6].at.clear();
        trials[7].at.clear();
        let (decisions, stops) = decide(
            &es(&[100, 300]),
            Direction::Max,
            4,
            &trials,
            &Decisions::new(),
        );
        assert!(decisions.is_empty() && stops.is_empty());
    }

    #[test]
    fn decisions_are_final_whatever_arrives_later() {
        let first = Decisions::from([(100, BTreeSet::from([0, 2]))]);
        let mut trials = recorded();
        // Config 2 now looks better at 100 than config 3 did: too late.
        trials[4].at.insert(100, 0.9);
        trials[5].unfinished = false;
        let (decisions, stops) = decide(&es(&[100, 300]), Direction::Max, 4, &trials, &first);
        assert_eq!(decisions.keys().collect::<Vec<_>>(), [&300]);
        assert!(stops.iter().any(|s| s.task == 5 && s.milestone == 100));
        assert!(
            !stops.iter().any(|s| s.task == 6),
            "finished trials are left alone"
        );
    }

    #[test]
    fn a_configuration_that_ended_short_of_a_milestone_is_not_judged_there() {
        let trials = vec![
            curve(1, 0, false, &[]),
            curve(2, 1, true, &[(100, 0.5)]),
            curve(3, 2, true, &[(100, 0.1)]),
        ];
        let (decisions, _) = decide(&es(&[100]), Direction::Max, 3, &trials, &Decisions::new());
        assert_eq!(decisions[&100], BTreeSet::from([2]));
    }

    #[test]
    fn minimising_stops_the_highest() {
        let (decisions, _) = decide(
            &es(&[100]),
            Direction::Min,
            4,
            &recorded(),
            &Decisions::new(),
        );
        assert_eq!(decisions[&100], BTreeSet::from([1, 3]));
    }

    #[test]
    fn one_configuration_is_never_stopped() {
        let trials = vec![curve(1, 0, true, &[(100, -5.0)])];
        let (decisions, stops) = decide(&es(&[100]), Direction::Max, 1, &trials, &Decisions::new());
        assert!(decisions[&100].is_empty() && stops.is_empty());
    }

    #[test]
    fn bad_early_stopping_is_refused() {
        assert!(check(&es(&[])).is_err());
        assert!(check(&es(&[300, 100])).unwrap_err().contains("ascending"));
        assert!(check(&EarlyStopping {
            milestones: vec![1],
            keep: 1.0
        })
        .unwrap_err()
        .contains("keep"));
        assert!(check(&es(&[100, 300, 900])).is_ok());
    }
}
