//! Early stopping at work: follows the progress of sweeps' trials on the
//! master's event stream, records each trial's signal when it reaches a
//! milestone, and stops the trials [`halving::decide`] picks — marked in the
//! store first, then cancelled through the scheduler's normal cancel path,
//! so they end CANCELLED and show as stopped early.
//!
//! The signal at a milestone is the mean `episode_return` of the progress
//! reports seen since the trial's previous milestone (the episode's return
//! when only one was seen). Values are stored, so a restarted master judges
//! with what was recorded before; the decisions themselves are the stop
//! marks.

use super::halving::{self, Decisions, TrialCurve};
use super::spec::{Direction, EarlyStopping};
use super::SweepId;
use crate::events::{EventKind, TaskEvent};
use crate::scheduler::SchedulerHandle;
use crate::store::Store;
use std::collections::{BTreeMap, HashMap, HashSet};
use trainyard_proto::TaskId;

/// One trial of a race.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Runner {
    pub config: usize,
    pub unfinished: bool,
    /// The signal at each milestone reached.
    pub at: BTreeMap<u64, f64>,
    /// Returns seen since the last milestone: sum and count.
    window: (f64, u32),
}

impl Runner {
    /// Takes one progress report; returns the milestones it reached with
    /// their values (pure).
    pub fn progress(
        &mut self,
        milestones: &[u64],
        episode: u64,
        episode_return: Option<f64>,
    ) -> Vec<(u64, f64)> {
        if let Some(r) = episode_return.filter(|r| r.is_finite()) {
            self.window.0 += r;
            self.window.1 += 1;
        }
        let mut reached = vec![];
        for &m in milestones {
            if episode < m || self.at.contains_key(&m) || self.window.1 == 0 {
                continue;
            }
            let value = self.window.0 / f64::from(self.window.1);
            self.at.insert(m, value);
            reached.push((m, value));
            self.window = (0.0, 0);
        }
        reached
    }
}

/// A sweep with early stopping whose trials still run.
struct Race {
    es: EarlyStopping,
    direction: Direction,
    configs: usize,
    runners: BTreeMap<TaskId, Runner>,
    decided: Decisions,
    /// Trials already told to stop, not told again.
    stopping: HashSet<TaskId>,
}

pub struct Stopper {
    store: Store,
    scheduler: SchedulerHandle,
    races: HashMap<SweepId, Race>,
    /// Which sweep a task is a trial of (`None`: none), asked once per task.
    membership: HashMap<TaskId, Option<SweepId>>,
}

impl Stopper {
    pub fn new(store: Store, scheduler: SchedulerHandle) -> Self {
        Self {
            store,
            scheduler,
            races: HashMap::new(),
            membership: HashMap::new(),
        }
    }

    /// Forgets everything and loads every running sweep with early
    /// stopping from the store (at start, and after missing events).
    pub async fn reload(&mut self) -> Result<(), String> {
        self.races.clear();
        self.membership.clear();
        for id in self
            .store
            .running_sweeps()
            .await
            .map_err(|e| e.to_string())?
        {
            self.load(id).await?;
        }
        Ok(())
    }

    /// Loads one sweep's race if it has early stopping and runs; then
    /// acts on what can be decided already.
    async fn load(&mut self, id: SweepId) -> Result<(), String> {
        let Some(sweep) = self.store.sweep(id).await.map_err(|e| e.to_string())? else {
            return Ok(());
        };
        for t in &sweep.trials {
            self.membership.insert(t.task, Some(id));
        }
        let es: Option<EarlyStopping> = sweep
            .spec
            .get("early_stopping")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok());
        let running = sweep.trials.iter().any(|t| !t.status.is_terminal());
        let (Some(es), true, None) = (es, running, sweep.record.cancelled_at_ms) else {
            return Ok(());
        };
        let values = self.store.milestones(id).await.map_err(|e| e.to_string())?;
        let mut decided = Decisions::new();
        let mut runners = BTreeMap::new();
        for t in &sweep.trials {
            if let Some(m) = t.stopped_at {
                decided.entry(m).or_default().insert(t.config);
            }
            runners.insert(
                t.task,
                Runner {
                    config: t.config,
                    unfinished: !t.status.is_terminal(),
                    at: values.get(&t.task).cloned().unwrap_or_default(),
                    window: (0.0, 0),
                },
            );
        }
        self.races.insert(
            id,
            Race {
                es,
                direction: sweep.record.direction,
                configs: sweep.configs.len(),
                runners,
                decided,
                stopping: HashSet::new(),
            },
        );
        self.judge(id).await
    }

    /// Takes one task event. A task is looked up (is it a trial?) at its
    /// first progress report; until then none of its events matter.
    pub async fn on_event(&mut self, event: &TaskEvent) -> Result<(), String> {
        let sweep = match self.membership.get(&event.task) {
            Some(s) => *s,
            None if event.kind != EventKind::Progress => return Ok(()),
            None => {
                let s = self
                    .store
                    .sweep_of(event.task)
                    .await
                    .map_err(|e| e.to_string())?;
                self.membership.insert(event.task, s);
                if let Some(id) = s {
                    if !self.races.contains_key(&id) {
                        self.load(id).await?;
                    }
                }
                s
            }
        };
        if event.status.is_terminal() {
            // No event follows a task's last.
            self.membership.remove(&event.task);
        }
        let Some(id) = sweep else {
            return Ok(());
        };
        let Some(race) = self.races.get_mut(&id) else {
            return Ok(());
        };
        let Some(runner) = race.runners.get_mut(&event.task) else {
            return Ok(());
        };
        let mut changed = false;
        if event.kind == EventKind::Progress {
            if let Some(p) = &event.progress {
                if let Some(episode) = p.episode {
                    let reached = runner.progress(&race.es.milestones, episode, p.episode_return);
                    for (m, v) in &reached {
                        self.store
                            .record_milestone(event.task, *m, *v)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    changed = !reached.is_empty();
                }
            }
        }
        if event.status.is_terminal() && runner.unfinished {
            runner.unfinished = false;
            changed = true;
        }
        if changed {
            self.judge(id).await?;
        }
        if self
            .races
            .get(&id)
            .is_some_and(|r| r.runners.values().all(|t| !t.unfinished))
        {
            self.races.remove(&id);
        }
        Ok(())
    }

    /// Decides what can be decided in a race, and stops its losers.
    async fn judge(&mut self, id: SweepId) -> Result<(), String> {
        let Some(race) = self.races.get_mut(&id) else {
            return Ok(());
        };
        let curves: Vec<TrialCurve> = race
            .runners
            .iter()
            .map(|(task, r)| TrialCurve {
                task: *task,
                config: r.config,
                unfinished: r.unfinished,
                at: r.at.clone(),
            })
            .collect();
        let (new, stops) = halving::decide(
            &race.es,
            race.direction,
            race.configs,
            &curves,
            &race.decided,
        );
        race.decided.extend(new);
        let stops: Vec<_> = stops
            .into_iter()
            .filter(|s| !race.stopping.contains(&s.task))
            .collect();
        if stops.is_empty() {
            return Ok(());
        }
        let marks: Vec<(TaskId, u64)> = stops.iter().map(|s| (s.task, s.milestone)).collect();
        self.store
            .mark_stopped(&marks)
            .await
            .map_err(|e| e.to_string())?;
        let tasks: Vec<TaskId> = stops.iter().map(|s| s.task).collect();
        tracing::info!(sweep = id, trials = ?marks, "early stopping: stopping trials");
        self.scheduler
            .cancel_many(&tasks)
            .await
            .map_err(|e| e.to_string())?;
        race.stopping.extend(tasks);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_milestone_takes_the_mean_return_since_the_last_one() {
        let mut r = Runner::default();
        let ms = [3, 6];
        assert!(r.progress(&ms, 1, Some(1.0)).is_empty());
        assert!(r.progress(&ms, 2, Some(2.0)).is_empty());
        assert_eq!(r.progress(&ms, 3, Some(3.0)), [(3, 2.0)]);
        // Reports can skip episodes: the milestone counts when passed.
        assert_eq!(r.progress(&ms, 8, Some(-1.0)), [(6, -1.0)]);
        assert!(
            r.progress(&ms, 9, Some(5.0)).is_empty(),
            "each milestone once"
        );
    }

    #[test]
    fn a_report_without_a_return_waits_for_one() {
        let mut r = Runner::default();
        assert!(r.progress(&[3], 4, None).is_empty());
        assert_eq!(r.progress(&[3], 5, Some(0.5)), [(3, 0.5)]);
        assert!(r.progress(&[3], 6, Some(f64::NAN)).is_empty());
    }
}
