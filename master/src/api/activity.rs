//! `GET /v1/activity?minutes=`: what the cluster got done in each of the
//! last minutes (15 by default, at most [`MAX_MINUTES`]): attempts that
//! ended completed, failed, cancelled, or lost (their lease lapsed, or the
//! dispatch never took), oldest minute first, the current (partial) minute
//! last. The dashboard's overview draws its throughput and failures from it.

use super::{ApiError, AppState};
use crate::store::EndedAttempts;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

/// The longest look back.
pub const MAX_MINUTES: u32 = 60;
const DEFAULT_MINUTES: u32 = 15;
const MINUTE_MS: i64 = 60_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityQuery {
    pub minutes: Option<u32>,
}

/// Attempts that ended within one minute, by how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Minute {
    pub start_ms: i64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// LEASE_LOST, UNDELIVERED or REJECTED: ended without the trainer's
    /// verdict.
    pub lost: u64,
}

/// Every one of the `minutes` minutes ending with the one holding `now_ms`,
/// with what ended in it (minutes without ends included, as zeros).
pub fn minutes(now_ms: i64, minutes: u32, ended: &[EndedAttempts]) -> Vec<Minute> {
    let since = first_minute(now_ms, minutes);
    let mut out: Vec<Minute> = (0..i64::from(minutes))
        .map(|i| Minute {
            start_ms: since + i * MINUTE_MS,
            ..Minute::default()
        })
        .collect();
    for e in ended {
        let Some(m) = usize::try_from(e.window).ok().and_then(|i| out.get_mut(i)) else {
            continue;
        };
        let slot = match e.outcome.as_str() {
            "COMPLETED" => &mut m.completed,
            "FAILED" => &mut m.failed,
            "CANCELLED" => &mut m.cancelled,
            _ => &mut m.lost,
        };
        *slot += e.count;
    }
    out
}

/// The start of the first of `minutes` whole minutes, the last holding
/// `now_ms`.
fn first_minute(now_ms: i64, minutes: u32) -> i64 {
    now_ms - now_ms.rem_euclid(MINUTE_MS) - (i64::from(minutes) - 1) * MINUTE_MS
}

pub async fn recent(
    State(app): State<AppState>,
    caller: super::auth::Caller,
    Query(q): Query<ActivityQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    caller.may(crate::access::Action::ReadFleet)?;
    let n = match q.minutes {
        None => DEFAULT_MINUTES,
        Some(n @ 1..=MAX_MINUTES) => n,
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "minutes {n} is out of range 1..={MAX_MINUTES}"
            )))
        }
    };
    let now = trainyard_proto::now_ms();
    let ended = app
        .store
        .ended_attempts(first_minute(now, n), MINUTE_MS)
        .await?;
    Ok(Json(serde_json::json!({
        "minute_ms": MINUTE_MS,
        "minutes": minutes(now, n, &ended),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(window: i64, outcome: &str, count: u64) -> EndedAttempts {
        EndedAttempts {
            window,
            outcome: outcome.into(),
            count,
        }
    }

    #[test]
    fn every_minute_is_listed_oldest_first_ending_with_the_current_one() {
        let now = 10 * MINUTE_MS + 12_345;
        let m = minutes(now, 3, &[]);
        let starts: Vec<i64> = m.iter().map(|m| m.start_ms).collect();
        assert_eq!(starts, vec![8 * MINUTE_MS, 9 * MINUTE_MS, 10 * MINUTE_MS]);
        assert!(m.iter().all(|m| m.completed + m.failed + m.lost == 0));
    }

    #[test]
    fn ends_land_in_their_minute_by_outcome() {
        let now = 10 * MINUTE_MS + 1;
        let m = minutes(
            now,
            2,
            &[
                ended(0, "COMPLETED", 4),
                ended(1, "FAILED", 1),
                ended(1, "LEASE_LOST", 2),
                ended(1, "UNDELIVERED", 1),
                ended(1, "CANCELLED", 3),
                // Ended after the read began: outside the window, ignored.
                ended(2, "COMPLETED", 9),
            ],
        );
        assert_eq!(m[0].completed, 4);
        assert_eq!((m[1].failed, m[1].lost, m[1].cancelled), (1, 3, 3));
        assert_eq!(m[1].completed, 0);
    }
}
