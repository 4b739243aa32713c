//! The users' side of a benchmark — submitting tasks and polling the master
//! until they end — run on a thread of its own, with its own runtime and
//! connections, so that its CPU time is told apart from the light hosts'
//! that share this process.

use anyhow::Context;
use std::future::Future;
use std::time::Duration;

/// Runs the future `work` makes to its end on a new thread with a
/// single-threaded runtime; returns its output and the CPU time the thread
/// used. Build the API client inside `work`'s future or just before it:
/// connections opened on another runtime do their I/O there.
pub async fn on_own_thread<T, F, Fut>(work: F) -> anyhow::Result<(T, Duration)>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<T>>,
    T: Send + 'static,
{
    let (done, outcome) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-users".into())
        .spawn(move || {
            let run = || -> anyhow::Result<(T, Duration)> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let before = super::probe::thread_cpu_time();
                let out = runtime.block_on(work())?;
                Ok((out, super::probe::thread_cpu_time().saturating_sub(before)))
            };
            let _ = done.send(run());
        })?;
    outcome.await.context("the users' thread died")?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_the_work_of_its_own_thread_only() {
        let spin = |d: Duration| {
            let until = std::time::Instant::now() + d;
            while std::time::Instant::now() < until {
                std::hint::black_box(0u64);
            }
        };
        let (started, has_started) = tokio::sync::oneshot::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let users = tokio::spawn(on_own_thread(move || async move {
            started.send(()).unwrap();
            // Blocked, using no CPU, while this test's thread spins.
            wait.recv().unwrap();
            spin(Duration::from_millis(50));
            Ok(7)
        }));
        has_started.await.unwrap();
        spin(Duration::from_millis(300));
        go.send(()).unwrap();
        let (out, cpu) = users.await.unwrap().unwrap();
        assert_eq!(out, 7);
        // The users' 50 ms at most (less on a busy machine), none of the
        // 300 ms this thread spun meanwhile.
        assert!(
            cpu > Duration::ZERO && cpu < Duration::from_millis(200),
            "{cpu:?}"
        );
    }

    #[tokio::test]
    async fn an_error_of_the_work_is_returned() {
        let err = on_own_thread(|| async { anyhow::bail!("no master") as anyhow::Result<()> })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no master"), "{err:#}");
    }
}
