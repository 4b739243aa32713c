//! The progress throttle: an attempt forwards at most one progress update
//! per interval, batching every event since the previous one, so a trainer
//! printing thousands of lines a second costs the master one message per
//! interval.

use std::time::Duration;
use trainyard_proto::messages::{Checkpoint, Progress, ProgressUpdate, MAX_PROGRESS_BATCH};
use trainyard_proto::AttemptRef;

/// Holds back progress updates so an attempt sends at most one per
/// interval (or one per [`MAX_PROGRESS_BATCH`] events), carrying every event
/// since the previous one and the newest checkpoint.
pub struct Throttle {
    interval: Duration,
    last_sent: Option<tokio::time::Instant>,
    pending: Option<ProgressUpdate>,
}

impl Throttle {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_sent: None,
            pending: None,
        }
    }

    pub fn offer(&mut self, mut update: ProgressUpdate) {
        if let Some(old) = self.pending.take() {
            let mut earlier = old.earlier;
            if !old.restated {
                earlier.push(old.progress);
            }
            earlier.append(&mut update.earlier);
            update.earlier = earlier;
            if update.checkpoint.is_none() {
                update.checkpoint = old.checkpoint;
            }
        }
        self.pending = Some(update);
    }

    /// Whether the held update should go now: its interval has passed, or
    /// it holds as many events as one update may carry.
    pub fn due(&self) -> bool {
        let full = self
            .pending
            .as_ref()
            .is_some_and(|p| p.earlier.len() + 1 >= MAX_PROGRESS_BATCH);
        full || self.last_sent.is_none_or(|t| t.elapsed() >= self.interval)
    }

    pub fn flush_at(&self) -> Option<tokio::time::Instant> {
        self.pending.as_ref()?;
        Some(
            self.last_sent
                .map_or_else(tokio::time::Instant::now, |t| t + self.interval),
        )
    }

    /// Hands on a checkpoint that was stored after the progress that
    /// announced it went out: with the held update, or else with `newest`
    /// (the attempt's newest event) again, as an update of its own.
    pub fn attach(
        &mut self,
        attempt: AttemptRef,
        checkpoint: Checkpoint,
        newest: Option<Progress>,
    ) {
        match &mut self.pending {
            Some(held) => held.checkpoint = Some(checkpoint),
            None => {
                self.pending = Some(ProgressUpdate {
                    attempt,
                    progress: newest.unwrap_or_default(),
                    checkpoint: Some(checkpoint),
                    earlier: vec![],
                    restated: true,
                })
            }
        }
    }

    pub fn take(&mut self) -> Option<ProgressUpdate> {
        let update = self.pending.take()?;
        self.last_sent = Some(tokio::time::Instant::now());
        Some(update)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(episode: u64, checkpoint: bool) -> ProgressUpdate {
        ProgressUpdate {
            attempt: AttemptRef::new(1, 1),
            progress: Progress {
                episode: Some(episode),
                ..Progress::default()
            },
            checkpoint: checkpoint.then(|| Checkpoint::External(format!("ckpt-{episode}"))),
            earlier: vec![],
            restated: false,
        }
    }

    #[test]
    fn the_throttle_batches_every_progress_event_and_keeps_the_checkpoint() {
        let mut t = Throttle::new(Duration::from_secs(60));
        assert!(t.due());
        t.offer(update(1, false));
        assert_eq!(t.take().unwrap().progress.episode, Some(1));
        assert!(!t.due());
        t.offer(update(2, true));
        t.offer(update(3, false));
        t.offer(update(4, false));
        let held = t.take().unwrap();
        assert_eq!(held.progress.episode, Some(4));
        let earlier: Vec<_> = held.earlier.iter().map(|p| p.episode).collect();
        assert_eq!(earlier, [Some(2), Some(3)], "none dropped, oldest first");
        assert_eq!(held.checkpoint, Some(Checkpoint::External("ckpt-2".into())));
        assert!(t.take().is_none());
    }

    #[test]
    fn a_checkpoint_stored_later_goes_with_the_held_update_or_the_newest_event_again() {
        let mut t = Throttle::new(Duration::from_secs(60));
        let stored = |n: u64| Checkpoint::External(format!("stored-{n}"));
        t.offer(update(5, false));
        t.attach(AttemptRef::new(1, 1), stored(1), None);
        let held = t.take().unwrap();
        assert_eq!(held.progress.episode, Some(5));
        assert_eq!(held.checkpoint, Some(stored(1)));
        let newest = update(5, false).progress;
        t.attach(AttemptRef::new(1, 1), stored(2), Some(newest.clone()));
        let again = t.take().unwrap();
        assert_eq!(again.progress, newest);
        assert!(again.restated, "not a new point of the curve");
        assert!(again.earlier.is_empty());
        assert_eq!(again.checkpoint, Some(stored(2)));
        // Held, then overtaken by new events: the restated one is not
        // counted again, the checkpoint stays.
        t.attach(AttemptRef::new(1, 1), stored(3), Some(newest));
        t.offer(update(6, false));
        let next = t.take().unwrap();
        assert_eq!(next.progress.episode, Some(6));
        assert!(!next.restated && next.earlier.is_empty());
        assert_eq!(next.checkpoint, Some(stored(3)));
    }

    #[test]
    fn a_full_batch_is_due_before_its_interval() {
        let mut t = Throttle::new(Duration::from_secs(60));
        t.offer(update(0, false));
        t.take();
        for episode in 1..MAX_PROGRESS_BATCH as u64 {
            t.offer(update(episode, false));
            assert!(!t.due(), "{episode}");
        }
        t.offer(update(MAX_PROGRESS_BATCH as u64, false));
        assert!(t.due());
        assert_eq!(t.take().unwrap().earlier.len(), MAX_PROGRESS_BATCH - 1);
    }
}
