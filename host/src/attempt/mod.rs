//! One attempt of one task, from lease to report.
//!
//! 1. Take the lease (both keys, atomically) — before anything else, so a
//!    crash from here on leaves a lease the master can see. Refused: tell
//!    the master and stop.
//! 2. Run the attempt's [`body`]: workspace, adapter, launch plan, Python
//!    environment, containment, trainer, result. The body sees the lease
//!    only as a watch of its deadline, renewed by [`crate::lease::renewer`].
//! 3. Release the lease and store the report in one atomic step; hand the
//!    report to the agent, which sends it until the master acknowledges it.
//!
//! [`blame`] tells the host's failures from the task's (with [`baseline`]
//! for a memory kill); [`throttle`] keeps progress updates to one per
//! interval.
//! [`throttle`] keeps progress updates to one per interval; [`keep`] stores
//! the checkpoints and outputs an attempt leaves; [`stall`] ends an attempt
//! whose trainer stopped making progress.

pub mod baseline;
pub mod blame;
pub mod body;
mod keep;
pub mod stall;
mod throttle;

pub use body::{outcome_name, Body, Ending};

use crate::adapters::plan::Allowlist;
use crate::agent::AttemptEvent;
use crate::lease::renewer::LeaseBook;
use crate::lease::{Acquired, LeaseLayer};
use crate::process::Deadline;
use crate::runtime::LoadedAdapter;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use trainyard_proto::messages::{AttemptReport, Dispatch};
use trainyard_proto::resources::Assignment;
use trainyard_proto::{now_ms, AttemptRef, WorkerId};

/// What the agent may ask of a running attempt.
#[derive(Debug, Clone)]
pub enum Control {
    /// The task was cancelled.
    Cancel,
    /// The master says this attempt is not the task's live one.
    Stop { reason: String },
    /// The host is shutting down.
    Shutdown,
}

/// Everything an attempt needs from its host: the lease layer, and what
/// the attempt's body runs with.
#[derive(Clone)]
pub struct AttemptEnv {
    pub lease: LeaseLayer,
    pub book: Arc<LeaseBook>,
    pub host: HostEnv,
}

/// What an attempt's body needs from its host, with no lease layer: a
/// real host and the local runner build one each.
#[derive(Clone)]
pub struct HostEnv {
    pub config: Arc<crate::config::HostConfig>,
    /// The trainer environment every attempt starts from (pass-through and
    /// operator variables), computed once.
    pub base_env: Arc<Vec<(String, String)>>,
    /// The containment layers this host enforces.
    pub enforcement: Arc<crate::containment::Enforcement>,
    pub metrics: crate::metrics::HostMetrics,
    /// Where the attempt's trainer and adapter lines wait for the master.
    pub logs: Arc<crate::logs::LogBook>,
    /// The Python environments, when an adapter's entry asks for one.
    pub python: Option<crate::python_env::PythonEnvs>,
    /// Emptied workspaces of ended attempts that no trainer had.
    pub spares: Arc<crate::workspace::Spares>,
    /// Sandboxes prepared ahead of trainers; `None`: every trainer is
    /// confined at its launch.
    pub sandboxes: Option<Arc<crate::process::SandboxPool>>,
    /// The artifact store, as the master names it; `None` where there is
    /// no master (a local run): checkpoints then travel inline.
    pub artifacts: Option<crate::artifacts::Shipper>,
}

/// An adapter with the programs it may launch.
#[derive(Clone)]
pub struct Adapter {
    pub loaded: LoadedAdapter,
    pub allowlist: Arc<Allowlist>,
    /// How its trainers are contained beyond the host's defaults.
    pub containment: Arc<crate::containment::AdapterContainment>,
    /// The requirements of the Python environment its trainers run in.
    pub python: Option<Arc<crate::python_env::PythonRequirements>>,
    /// Its entry's default progress timeout, for tasks that set none
    /// ([`stall`]).
    pub progress_timeout: Option<std::time::Duration>,
}

/// Runs the attempt to its end, with the devices and share in
/// `assignment`, and reports through `events`.
pub async fn run(
    env: AttemptEnv,
    adapter: Adapter,
    dispatch: Dispatch,
    worker: WorkerId,
    assignment: Assignment,
    mut control: mpsc::Receiver<Control>,
    events: mpsc::Sender<AttemptEvent>,
) {
    let attempt = dispatch.attempt;
    let started = Instant::now();
    let slot = worker.slot;

    let deadline = match take_lease(&env.lease, &worker, attempt).await {
        Ok(deadline) => deadline,
        Err(reason) => {
            tracing::warn!(%attempt, %reason, "dispatch refused");
            let _ = events
                .send(AttemptEvent::Rejected {
                    attempt,
                    slot,
                    reason,
                })
                .await;
            return;
        }
    };
    let mut lease = env.book.hold(attempt, worker.clone(), deadline);
    let host = &env.host;
    let running = host.metrics.running();
    let _ = events.send(AttemptEvent::Accepted { attempt, slot }).await;
    tracing::info!(%attempt, %worker, adapter = %dispatch.adapter, "attempt started");

    let logs = host.logs.writer(attempt);
    let body = Body {
        env: host,
        adapter: &adapter,
        dispatch: &dispatch,
        assignment: &assignment,
        logs: &logs,
        events: &events,
    };
    let ending = body.run(&mut control, &mut lease.state).await;

    // Every line is in: the trainer's pipes are drained and the adapter
    // instance is gone.
    logs.close();
    // Stop renewing before releasing, so a renewal cannot race the release.
    drop(lease);
    let report = AttemptReport {
        attempt,
        host: host.config.id.clone(),
        slot,
        outcome: ending.outcome,
        assignment: assignment.clone(),
        duration_ms: started.elapsed().as_millis() as u64,
        finished_at_ms: now_ms(),
        progress: ending.progress,
    };
    if let Err(e) = env.lease.release(&worker, &report).await {
        // The report still goes over the connection; the lease runs out.
        tracing::warn!(%attempt, error = %e, "could not release the lease and store the report in Redis");
    }
    // Removed (or emptied, if no trainer had it) before the slot is free.
    if let Some(ws) = ending.workspace {
        if !host.config.keep_workspaces {
            if let Err(e) = host.spares.give_back(ws) {
                tracing::warn!(%attempt, error = %e, "could not remove the workspace");
            }
        }
    }
    tracing::info!(%attempt, outcome = outcome_name(&report.outcome), duration_ms = report.duration_ms, "attempt finished");
    drop(running);
    let _ = events.send(AttemptEvent::Finished { slot, report }).await;
}

/// Takes the attempt's lease; `Err` says why it may not run.
async fn take_lease(
    lease: &LeaseLayer,
    worker: &WorkerId,
    attempt: AttemptRef,
) -> Result<Deadline, String> {
    match lease.acquire(worker, attempt).await {
        Ok(Acquired::Granted { deadline }) => Ok(deadline),
        Ok(Acquired::Fenced { fence }) => Err(format!(
            "the master gave this attempt up (attempts below {fence} may not run)"
        )),
        Ok(Acquired::Held { by }) => Err(format!("the task's lease is held by {by}")),
        Err(e) => {
            // Redis may have written the lease even so; if it did and it
            // stayed, the task could not run anywhere for a lease TTL.
            match lease.abandon(worker, attempt).await {
                Ok(true) => {
                    tracing::info!(%attempt, "took back the lease Redis had written after all")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(%attempt, error = %e, "could not check for a lease written after all; it lapses with its TTL")
                }
            }
            Err(format!("could not take the lease: {e}"))
        }
    }
}
