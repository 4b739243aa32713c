//! The master's sweep supervisor: a loop beside the scheduler that runs
//! early stopping ([`Stopper`]) on the task events, and finishes the
//! cancellation of cancelled sweeps (a master that died between marking a
//! sweep cancelled and cancelling its trials finishes the job at its next
//! start). Everything it changes goes through the scheduler's normal
//! cancel path.

use super::stopping::Stopper;
use crate::events::Events;
use crate::scheduler::SchedulerHandle;
use crate::store::Store;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// How long the supervisor waits before trying again after the store or
/// the scheduler failed it.
const RETRY: Duration = Duration::from_secs(5);

pub struct Supervisor {
    pub store: Store,
    pub scheduler: SchedulerHandle,
    pub events: Events,
}

impl Supervisor {
    /// Runs until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        // Subscribed before anything is read, so no event falls between.
        let mut events = self.events.subscribe();
        let mut stopper = Stopper::new(self.store.clone(), self.scheduler.clone());
        let mut stale = true;
        loop {
            if stale {
                match self.catch_up(&mut stopper).await {
                    Ok(()) => stale = false,
                    Err(e) => {
                        tracing::warn!(error = %e, "sweep supervisor: cannot read the sweeps; retrying");
                        tokio::select! {
                            _ = &mut shutdown => return,
                            _ = tokio::time::sleep(RETRY) => continue,
                        }
                    }
                }
            }
            tokio::select! {
                _ = &mut shutdown => return,
                event = events.recv() => match event {
                    Ok(event) => {
                        if let Err(e) = stopper.on_event(&event).await {
                            tracing::warn!(error = %e, task = event.task, "sweep supervisor: event not handled; reloading");
                            stale = true;
                        }
                    }
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "sweep supervisor missed task events; reloading the sweeps");
                        stale = true;
                    }
                    Err(RecvError::Closed) => return,
                },
            }
        }
    }

    /// Reloads the running sweeps and cancels the unfinished trials of
    /// cancelled ones.
    async fn catch_up(&self, stopper: &mut Stopper) -> Result<(), String> {
        stopper.reload().await?;
        let left = self
            .store
            .unfinished_trials_of_cancelled_sweeps()
            .await
            .map_err(|e| e.to_string())?;
        if left.is_empty() {
            return Ok(());
        }
        tracing::info!(
            trials = left.len(),
            "cancelling the trials left of cancelled sweeps"
        );
        self.scheduler
            .cancel_many(&left)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}
