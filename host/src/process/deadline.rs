//! Lease deadlines as absolute instants on `CLOCK_BOOTTIME`.
//!
//! The host and its supervisors read the same clock, so a deadline travels
//! between them as a plain number and means the same instant on both sides.
//! Being absolute, a renewal that reaches the supervisor late still ends the
//! lease exactly where the host meant it to end, never later. BOOTTIME rather
//! than MONOTONIC because it keeps counting while the machine is suspended: a
//! lease in Redis expires during a suspend, so the deadline must pass too.

use nix::time::{clock_gettime, ClockId};
use std::time::Duration;

/// An absolute instant on CLOCK_BOOTTIME.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline {
    since_boot: Duration,
}

impl Deadline {
    /// The current instant.
    pub fn now() -> Deadline {
        // CLOCK_BOOTTIME exists on every Linux since 2.6.39; clock_gettime can
        // only fail for an unknown clock id.
        let now = clock_gettime(ClockId::CLOCK_BOOTTIME)
            .expect("CLOCK_BOOTTIME is available on every supported Linux kernel");
        Deadline {
            since_boot: Duration::from(now),
        }
    }

    /// The instant `d` from now.
    pub fn after(d: Duration) -> Deadline {
        Deadline::now().checked_add(d)
    }

    /// The instant `d` after this one (saturating at the end of time).
    pub fn checked_add(self, d: Duration) -> Deadline {
        Deadline {
            since_boot: self.since_boot.saturating_add(d),
        }
    }

    /// The instant `d` before this one (saturating at boot).
    pub fn saturating_sub(self, d: Duration) -> Deadline {
        Deadline {
            since_boot: self.since_boot.saturating_sub(d),
        }
    }

    /// How long until this instant; zero once it has passed.
    pub fn remaining(self) -> Duration {
        self.since_boot.saturating_sub(Deadline::now().since_boot)
    }

    /// Whether this instant is at or before `now`.
    pub fn has_passed(self, now: Deadline) -> bool {
        self <= now
    }

    /// The instant that lies `since_boot` after the machine booted.
    pub fn from_boottime(since_boot: Duration) -> Deadline {
        Deadline { since_boot }
    }

    /// Time from boot to this instant, as CLOCK_BOOTTIME reads it.
    pub fn since_boot(self) -> Duration {
        self.since_boot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let d = Deadline::from_boottime(Duration::from_secs(5));
        assert_eq!(
            d.saturating_sub(Duration::from_secs(10)).since_boot(),
            Duration::ZERO
        );
        let far = Deadline::from_boottime(Duration::MAX);
        assert_eq!(far.checked_add(Duration::from_secs(1)), far);
    }

    #[test]
    fn a_past_instant_has_nothing_remaining() {
        let past = Deadline::now().saturating_sub(Duration::from_secs(1));
        assert_eq!(past.remaining(), Duration::ZERO);
        assert!(past.has_passed(Deadline::now()));
        assert!(Deadline::after(Duration::from_secs(3600)).remaining() > Duration::from_secs(3000));
    }
}
