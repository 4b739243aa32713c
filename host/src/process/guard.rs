//! Background tasks owned by a [`super::Trainer`]: cancelled when the trainer
//! is dropped, so nothing outlives the handle that started it.

use std::future::Future;
use tokio::task::{JoinError, JoinHandle};

/// A spawned task that is aborted when the guard is dropped.
#[derive(Debug)]
pub(crate) struct TaskGuard<T>(JoinHandle<T>);

impl<T: Send + 'static> TaskGuard<T> {
    pub(crate) fn spawn<F>(task: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Self(tokio::spawn(task))
    }

    /// Waits for the task's result.
    pub(crate) async fn join(mut self) -> Result<T, JoinError> {
        (&mut self.0).await
    }

    /// Aborts the task and waits until it has been dropped, so whatever it
    /// owned (a socket, a pipe) is closed when this returns.
    pub(crate) async fn cancel(mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl<T> Drop for TaskGuard<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
