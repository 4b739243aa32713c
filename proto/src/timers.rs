//! The timers master and hosts must agree on, with the original scheduler's
//! defaults. Every one is configurable (`[timers]` in `config.toml`), so tests
//! run the same code with sub-second values.
//!
//! How they bound recovery: a host renews its leases every
//! `heartbeat_interval`; if it dies, its leases expire at most `lease_ttl`
//! after its last renewal, and the master's next sweep, at most
//! `sweep_interval` later, requeues the task. A host that cannot renew stops
//! its trainers `lease_safety_margin` before the lease expires in Redis, so
//! the next attempt never overlaps the old one.

use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timers {
    /// How often a host sends a heartbeat and renews its leases.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// TTL of `worker:{host}:hb`.
    #[serde(with = "humantime_serde")]
    pub heartbeat_ttl: Duration,
    /// TTL of both lease keys, renewed by each heartbeat.
    #[serde(with = "humantime_serde")]
    pub lease_ttl: Duration,
    /// How long before its lease expires a host that could not renew it kills
    /// the trainer. Covers clock-rate drift between host and Redis and the
    /// time a kill takes. Capped at a quarter of `lease_ttl`.
    #[serde(with = "humantime_serde")]
    pub lease_safety_margin: Duration,
    /// How often the master's recovery sweep runs.
    #[serde(with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// How long a dispatched task may wait for the host's acceptance before
    /// the sweep takes it back (if the host took no lease).
    #[serde(with = "humantime_serde")]
    pub dispatch_ack_timeout: Duration,
    /// First reconnect delay of a host; doubled after each failure.
    #[serde(with = "humantime_serde")]
    pub reconnect_initial: Duration,
    /// Longest reconnect delay.
    #[serde(with = "humantime_serde")]
    pub reconnect_max: Duration,
    /// Random spread of each reconnect delay, as a fraction (0.25 = ±25 %).
    pub reconnect_jitter: f64,
    /// A connection that has not completed its handshake within this is
    /// closed.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// A connection on which nothing arrives for this long is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Between SIGTERM and SIGKILL when a trainer is stopped.
    #[serde(with = "humantime_serde")]
    pub stop_grace: Duration,
    /// How often a host re-sends reports the master has not acknowledged.
    #[serde(with = "humantime_serde")]
    pub report_resend_interval: Duration,
    /// How long a fence against a given-up attempt stays in Redis.
    #[serde(with = "humantime_serde")]
    pub fence_ttl: Duration,
    /// How long an unacknowledged report stays in Redis at most.
    #[serde(with = "humantime_serde")]
    pub report_retention: Duration,
    /// How long a Redis request (or connecting) may take before it counts as
    /// failed, on master and hosts alike.
    #[serde(with = "humantime_serde")]
    pub redis_timeout: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(10),
            heartbeat_ttl: Duration::from_secs(30),
            lease_ttl: Duration::from_secs(120),
            lease_safety_margin: Duration::from_secs(2),
            sweep_interval: Duration::from_secs(5),
            dispatch_ack_timeout: Duration::from_secs(30),
            reconnect_initial: Duration::from_secs(1),
            reconnect_max: Duration::from_secs(60),
            reconnect_jitter: 0.25,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(45),
            stop_grace: Duration::from_secs(5),
            report_resend_interval: Duration::from_secs(5),
            fence_ttl: Duration::from_secs(24 * 3600),
            report_retention: Duration::from_secs(7 * 24 * 3600),
            redis_timeout: Duration::from_secs(2),
        }
    }
}

/// A combination of timers that cannot work.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid timers: {0}")]
pub struct InvalidTimers(pub String);

impl Timers {
    /// The margin actually applied: the configured one, at most a quarter of
    /// the lease TTL.
    pub fn effective_margin(&self) -> Duration {
        self.lease_safety_margin.min(self.lease_ttl / 4)
    }

    /// How long a connection that holds a host's id has to answer a
    /// liveness probe when a second connection claims that id: half the
    /// handshake timeout, so the newcomer hears the verdict within its own
    /// handshake. A connection that does not answer in time is closed and
    /// the newcomer takes its place; one that answers keeps it.
    pub fn liveness_probe_timeout(&self) -> Duration {
        (self.handshake_timeout / 2).min(self.idle_timeout)
    }

    /// Checks the relations the recovery guarantees rely on.
    pub fn validate(&self) -> Result<(), InvalidTimers> {
        let fail = |m: &str| Err(InvalidTimers(m.to_string()));
        if self.heartbeat_interval.is_zero() || self.sweep_interval.is_zero() {
            return fail("heartbeat_interval and sweep_interval must be positive");
        }
        if self.redis_timeout.is_zero() {
            return fail("redis_timeout must be positive");
        }
        if self.lease_ttl < self.heartbeat_interval * 2 {
            return fail("lease_ttl must be at least twice heartbeat_interval, or one lost heartbeat loses the lease");
        }
        if self.idle_timeout <= self.heartbeat_interval {
            return fail("idle_timeout must be longer than heartbeat_interval");
        }
        if self.reconnect_initial.is_zero() || self.reconnect_max < self.reconnect_initial {
            return fail("reconnect_initial must be positive and at most reconnect_max");
        }
        if !(0.0..1.0).contains(&self.reconnect_jitter) {
            return fail("reconnect_jitter must be in [0, 1)");
        }
        if self.fence_ttl < self.lease_ttl {
            return fail("fence_ttl must be at least lease_ttl");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_original_schedulers_and_valid() {
        let t = Timers::default();
        assert_eq!(t.heartbeat_interval, Duration::from_secs(10));
        assert_eq!(t.lease_ttl, Duration::from_secs(120));
        assert_eq!(t.sweep_interval, Duration::from_secs(5));
        assert_eq!(t.validate(), Ok(()));
    }

    #[test]
    fn a_lease_shorter_than_two_heartbeats_is_refused() {
        let t = Timers {
            lease_ttl: Duration::from_secs(15),
            ..Timers::default()
        };
        assert!(t.validate().is_err());
    }

    #[test]
    fn the_margin_never_exceeds_a_quarter_of_the_lease() {
        let t = Timers {
            lease_ttl: Duration::from_millis(1000),
            lease_safety_margin: Duration::from_secs(2),
            heartbeat_interval: Duration::from_millis(200),
            ..Timers::default()
        };
        assert_eq!(t.effective_margin(), Duration::from_millis(250));
    }

    #[test]
    fn durations_read_as_human_text() {
        let t: Timers =
            serde_json::from_str(r#"{"lease_ttl": "2s", "heartbeat_interval": "250ms"}"#).unwrap();
        assert_eq!(t.lease_ttl, Duration::from_secs(2));
        assert_eq!(t.heartbeat_interval, Duration::from_millis(250));
        assert!(serde_json::from_str::<Timers>(r#"{"lease_tll": "2s"}"#).is_err());
    }
}
