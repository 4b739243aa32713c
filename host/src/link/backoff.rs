//! Reconnect backoff: 1 s doubling to 60 s by default, each delay spread by
//! ±25 % jitter so hosts that lost the master together do not come back
//! together. Reset only after a completed handshake, never after a bare TCP
//! connect (a master that accepts and then drops connections must not pull
//! every host into a tight loop).

use rand::Rng;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: f64,
    /// The delay the next failure waits, before jitter.
    current: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, jitter: f64) -> Self {
        Self {
            initial,
            max,
            jitter: jitter.clamp(0.0, 0.99),
            current: initial,
        }
    }

    /// The delay before the next attempt; the one after doubles, up to the cap.
    pub fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let base = self.current;
        self.current = (self.current * 2).min(self.max);
        jittered(base, self.jitter, rng)
    }

    /// The delay the next failure would wait, before jitter.
    pub fn current(&self) -> Duration {
        self.current
    }

    /// Back to the initial delay: the handshake completed.
    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

/// `base` spread uniformly over `[base·(1−jitter), base·(1+jitter)]`.
pub fn jittered(base: Duration, jitter: f64, rng: &mut impl Rng) -> Duration {
    if jitter <= 0.0 {
        return base;
    }
    let factor = rng.random_range((1.0 - jitter)..=(1.0 + jitter));
    base.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn seed_defaults() -> Backoff {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(60), 0.25)
    }

    /// The original's `testExponentialBackoffWithJitter`, over many draws.
    #[test]
    fn delays_stay_inside_their_jitter_bounds_and_the_cap() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let mut backoff = seed_defaults();
            let expected = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0];
            for base in expected {
                let d = backoff.next_delay(&mut rng).as_secs_f64();
                assert!(
                    d >= base * 0.75 - 1e-9 && d <= base * 1.25 + 1e-9,
                    "delay {d} outside ±25% of {base}"
                );
                assert!(d <= 75.0, "delay {d} above the cap with jitter");
            }
        }
    }

    #[test]
    fn jitter_actually_spreads_delays() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let draws: Vec<f64> = (0..100)
            .map(|_| seed_defaults().next_delay(&mut rng).as_secs_f64())
            .collect();
        let (lo, hi) = draws
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
        assert!(hi - lo > 0.3, "100 first delays spread only {lo}..{hi}");
    }

    #[test]
    fn reset_returns_to_the_initial_delay() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut backoff = seed_defaults();
        for _ in 0..10 {
            backoff.next_delay(&mut rng);
        }
        assert_eq!(backoff.current(), Duration::from_secs(60));
        backoff.reset();
        assert_eq!(backoff.current(), Duration::from_secs(1));
    }
}
