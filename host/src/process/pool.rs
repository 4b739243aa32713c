//! The host's prepared sandboxes: at most one per slot, each made for the
//! kind of attempt the host launched last ([`SandboxPlan`]) while the
//! slots run, so the next attempt of that kind starts in one at once.
//!
//! Each launch takes a prepared sandbox whose plan is the attempt's — the
//! warm path — or, when none is ready, confines the attempt the cold way
//! (`trainyard_host_sandbox_launches_total` counts both, and why a launch
//! was cold); either way it starts preparing a sandbox like it for the
//! next one, in the background, taking the place of the oldest sandbox of
//! another kind when all places are taken. A sandbox serves one attempt
//! and is never given back.

use super::sandbox::PreparedSandbox;
use super::{Deadline, LaunchSpec, SpawnError, Trainer};
use crate::containment::sandbox::{split, SandboxPlan};
use crate::metrics::HostMetrics;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::mpsc;

/// How an attempt's trainer was started, as the metric names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchPath {
    /// In a sandbox prepared ahead of it.
    Warm,
    /// Confined at launch: sandboxes were prepared, none for its plan.
    ColdMismatch,
    /// Confined at launch: nothing was prepared for it yet (the host's
    /// first attempt of its kind, or its sandbox still being made).
    ColdUnprepared,
}

impl LaunchPath {
    pub fn name(self) -> &'static str {
        match self {
            LaunchPath::Warm => "warm",
            LaunchPath::ColdMismatch => "cold_mismatch",
            LaunchPath::ColdUnprepared => "cold_unprepared",
        }
    }
}

/// One place of the pool: a sandbox being prepared, or ready.
struct Place {
    id: u64,
    plan: SandboxPlan,
    sandbox: Option<PreparedSandbox>,
}

#[derive(Default)]
struct Places {
    places: Vec<Place>,
    next_id: u64,
    closed: bool,
}

/// What to do about the pool after a launch.
#[derive(Debug, PartialEq, Eq)]
enum Refill {
    /// Prepare a sandbox like the attempt's in a free place.
    Prepare,
    /// Drop the sandbox in this place (the oldest of another plan) and
    /// prepare one like the attempt's.
    Replace(usize),
    /// Every place holds one like it already.
    Nothing,
}

/// The refill after launching an attempt of `launched`'s plan, given the
/// plans of the places (oldest first) and how many there may be.
fn refill(plans: &[&SandboxPlan], capacity: usize, launched: &SandboxPlan) -> Refill {
    if plans.len() < capacity {
        return Refill::Prepare;
    }
    match plans.iter().position(|p| *p != launched) {
        Some(oldest_other) => Refill::Replace(oldest_other),
        None => Refill::Nothing,
    }
}

/// Which ready sandbox an attempt of `wanted`'s plan takes, or why none.
fn choose(places: &[(&SandboxPlan, bool)], wanted: &SandboxPlan) -> Result<usize, LaunchPath> {
    if let Some(ready) = places.iter().position(|(p, ready)| *ready && *p == wanted) {
        return Ok(ready);
    }
    if places.iter().any(|(p, _)| *p == wanted) || places.is_empty() {
        Err(LaunchPath::ColdUnprepared)
    } else {
        Err(LaunchPath::ColdMismatch)
    }
}

/// The prepared sandboxes of one host.
pub struct SandboxPool {
    /// The `trainyard-supervise` binary.
    supervisor: PathBuf,
    capacity: usize,
    metrics: HostMetrics,
    places: Mutex<Places>,
}

impl SandboxPool {
    /// A pool of at most `capacity` sandboxes (the host's slots).
    pub fn new(supervisor: PathBuf, capacity: usize, metrics: HostMetrics) -> Arc<SandboxPool> {
        Arc::new(SandboxPool {
            supervisor,
            capacity,
            metrics,
            places: Mutex::new(Places::default()),
        })
    }

    /// Starts the trainer of `spec`, warm or cold, and prepares a sandbox
    /// for the next attempt like it.
    pub async fn launch(
        self: &Arc<Self>,
        spec: LaunchSpec,
        deadline: Deadline,
    ) -> Result<(Trainer, mpsc::Receiver<String>), SpawnError> {
        let Some(confinement) = spec.confinement.as_ref() else {
            return Trainer::spawn(spec, deadline).await;
        };
        let (plan, _) = split(confinement);
        let taken = self.take(&plan);
        self.refill(plan);
        let path = taken.as_ref().err().copied().unwrap_or(LaunchPath::Warm);
        self.metrics.sandbox_launched(path.name());
        match taken {
            Ok(sandbox) => Trainer::launch(sandbox, spec, deadline).await,
            Err(_) => Trainer::spawn(spec, deadline).await,
        }
    }

    /// A ready sandbox of `plan`, taken out of the pool.
    fn take(&self, plan: &SandboxPlan) -> Result<PreparedSandbox, LaunchPath> {
        let mut places = self.lock();
        // A sandbox whose supervisor ended can serve nobody.
        places
            .places
            .retain_mut(|place| match place.sandbox.as_mut() {
                Some(sandbox) => sandbox.alive(),
                None => true,
            });
        let seen: Vec<(&SandboxPlan, bool)> = places
            .places
            .iter()
            .map(|p| (&p.plan, p.sandbox.is_some()))
            .collect();
        let index = choose(&seen, plan)?;
        let place = places.places.remove(index);
        self.publish(&places);
        place.sandbox.ok_or(LaunchPath::ColdUnprepared)
    }

    /// Starts preparing a sandbox of `plan`, if the pool wants one.
    fn refill(self: &Arc<Self>, plan: SandboxPlan) {
        let id = {
            let mut places = self.lock();
            if places.closed {
                return;
            }
            let plans: Vec<&SandboxPlan> = places.places.iter().map(|p| &p.plan).collect();
            match refill(&plans, self.capacity, &plan) {
                Refill::Nothing => return,
                Refill::Replace(index) => {
                    places.places.remove(index);
                    self.publish(&places);
                }
                Refill::Prepare => {}
            }
            let id = places.next_id;
            places.next_id += 1;
            places.places.push(Place {
                id,
                plan: plan.clone(),
                sandbox: None,
            });
            id
        };
        let pool = self.clone();
        tokio::spawn(async move {
            let prepared = PreparedSandbox::prepare(&pool.supervisor, plan).await;
            pool.prepared(id, prepared);
        });
    }

    /// Puts a sandbox that was prepared in its place, unless the place was
    /// given up meanwhile (then dropping it ends it).
    fn prepared(&self, id: u64, prepared: Result<PreparedSandbox, SpawnError>) {
        let mut places = self.lock();
        let index = places.places.iter().position(|p| p.id == id);
        match (prepared, index) {
            (Ok(sandbox), Some(index)) => places.places[index].sandbox = Some(sandbox),
            (Ok(_), None) => {}
            (Err(error), index) => {
                if let Some(index) = index {
                    places.places.remove(index);
                }
                tracing::warn!(%error, "could not prepare a sandbox; the next attempt of its kind is confined at launch");
            }
        }
        self.publish(&places);
    }

    /// Shows how many sandboxes are ready in the metrics.
    fn publish(&self, places: &Places) {
        let ready = places.places.iter().filter(|p| p.sandbox.is_some()).count();
        self.metrics.sandboxes_ready(ready);
    }

    /// Ends every prepared sandbox and prepares no more: for the host's
    /// shutdown, before its cgroups are removed.
    pub fn close(&self) {
        let mut places = self.lock();
        places.closed = true;
        places.places.clear();
        self.publish(&places);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(network: bool) -> SandboxPlan {
        SandboxPlan {
            isolate_network: network,
            ..SandboxPlan::default()
        }
    }

    #[test]
    fn a_launch_takes_a_ready_sandbox_of_its_plan_only() {
        let (a, b) = (plan(true), plan(false));
        assert_eq!(choose(&[(&b, true), (&a, true)], &a), Ok(1));
        assert_eq!(
            choose(&[(&b, true)], &a),
            Err(LaunchPath::ColdMismatch),
            "another adapter's grants"
        );
        assert_eq!(
            choose(&[(&a, false)], &a),
            Err(LaunchPath::ColdUnprepared),
            "still being prepared"
        );
        assert_eq!(choose(&[], &a), Err(LaunchPath::ColdUnprepared));
    }

    #[test]
    fn each_launch_prepares_one_like_it_replacing_the_oldest_of_another_kind() {
        let (a, b) = (plan(true), plan(false));
        assert_eq!(refill(&[&a], 2, &a), Refill::Prepare);
        assert_eq!(refill(&[&a, &b, &b], 3, &b), Refill::Replace(0));
        assert_eq!(refill(&[&b, &a], 2, &b), Refill::Replace(1));
        assert_eq!(refill(&[&a, &a], 2, &a), Refill::Nothing);
        assert_eq!(refill(&[], 0, &a), Refill::Nothing);
    }
}
