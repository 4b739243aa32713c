//! The recovery sweep's Redis side: one consistent snapshot of every live
//! task's lease, the dataset's epoch and the reports waiting to be recorded,
//! in a bounded number of round trips whatever the number of tasks; and the
//! fence that makes giving up an attempt final.
//!
//! Round trips per sweep, whatever the number of live tasks (each function
//! here returns how many it made, so the scheduler can show them):
//! - [`observe`]: one `MULTI` block (epoch and its grace, pending reports,
//!   `MGET` of every owner key), plus one `MGET` of the pending reports if
//!   there are any;
//! - [`ensure_epoch`]: one, only when Redis lost (or never had) its epoch;
//! - [`forget_reports`]: one, only when the snapshot held dangling entries;
//! - [`fence`]: one script call fencing every attempt given up in that sweep,
//!   two when Redis does not have the script cached yet.
//!
//! Together at most [`MAX_ROUND_TRIPS`]; a quiet sweep (no reports, nothing
//! given up) makes exactly one.

use crate::recovery::Lease;
use redis::aio::ConnectionManager;
use redis::AsyncCommands;
use std::collections::HashMap;
use std::time::Duration;
use trainyard_proto::keys::{self, Keys};
use trainyard_proto::messages::AttemptReport;
use trainyard_proto::{AttemptRef, TaskId};

/// The most round trips one sweep makes: two to observe, one to recreate
/// the epoch, one to drop dangling reports, two to fence.
pub const MAX_ROUND_TRIPS: u32 = 6;

/// The dataset's epoch as Redis held it, and how long the window in which
/// missing leases prove nothing still runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochSeen {
    /// `trainyard:epoch`; `None` if Redis has lost (or never had) it.
    pub epoch: Option<String>,
    /// What is left of `trainyard:epoch_grace`'s TTL; `None` when the key
    /// is absent (no loss of data, or its window has passed).
    pub grace_left: Option<Duration>,
}

/// `PTTL`'s answer as time left: negative answers mean no key (-2) or a key
/// without a TTL (-1), which no master writes and none may trust forever.
fn time_left(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

/// What Redis held at one instant.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub epoch: EpochSeen,
    pub leases: HashMap<TaskId, Lease>,
    /// Reports of finished attempts waiting for the master.
    pub reports: Vec<AttemptReport>,
    /// Entries of `reports:pending` whose report is gone or unreadable;
    /// removed from the set after the sweep.
    pub dangling: Vec<AttemptRef>,
    /// Entries of `reports:pending` that are not attempt references at all.
    pub garbage: Vec<String>,
    /// Requests made to read all this: 1, or 2 when reports were pending.
    pub round_trips: u32,
}

/// Reads the snapshot for these live tasks.
pub async fn observe(
    con: &mut ConnectionManager,
    keys: &Keys,
    live: &[TaskId],
) -> redis::RedisResult<Snapshot> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .get(keys.epoch())
        .pttl(keys.epoch_grace())
        .smembers(keys.pending_reports());
    if !live.is_empty() {
        let owners: Vec<String> = live.iter().map(|id| keys.task_owner(*id)).collect();
        pipe.mget(owners);
    }
    type Read = (Option<String>, i64, Vec<String>, Vec<Option<String>>);
    let (epoch, grace, pending, owners): Read = if live.is_empty() {
        let (epoch, grace, pending): (Option<String>, i64, Vec<String>) =
            pipe.query_async(con).await?;
        (epoch, grace, pending, vec![])
    } else {
        pipe.query_async(con).await?
    };

    let leases = live
        .iter()
        .zip(owners)
        .map(|(id, value)| {
            let lease = match value {
                None => Lease::Absent,
                Some(v) => match keys::parse_owner_value(&v) {
                    Some((worker, attempt)) => Lease::Held { worker, attempt },
                    None => Lease::Unreadable(v),
                },
            };
            (*id, lease)
        })
        .collect();

    let mut snapshot = Snapshot {
        epoch: EpochSeen {
            epoch,
            grace_left: time_left(grace),
        },
        leases,
        round_trips: 1,
        ..Snapshot::default()
    };
    let mut attempts = vec![];
    for member in pending {
        match keys::parse_attempt_value(&member) {
            Some(a) => attempts.push(a),
            None => snapshot.garbage.push(member),
        }
    }
    if !attempts.is_empty() {
        let report_keys: Vec<String> = attempts.iter().map(|a| keys.task_report(*a)).collect();
        let bodies: Vec<Option<Vec<u8>>> = con.mget(report_keys).await?;
        snapshot.round_trips += 1;
        for (attempt, body) in attempts.into_iter().zip(bodies) {
            match body.map(|b| trainyard_proto::frame::decode::<AttemptReport>(&b)) {
                Some(Ok(report)) if report.attempt == attempt => snapshot.reports.push(report),
                Some(Ok(_)) | Some(Err(_)) => {
                    tracing::warn!(%attempt, "unreadable report in Redis; dropping it");
                    snapshot.dangling.push(attempt);
                }
                None => snapshot.dangling.push(attempt),
            }
        }
    }
    Ok(snapshot)
}

/// The fence's verdicts, aligned with the attempts given.
#[derive(Debug, Default)]
pub struct Fenced {
    /// Whether each attempt was fenced; one that was not has a lease or a
    /// report again and must be left alone.
    pub verdicts: Vec<bool>,
    /// 0 when nothing was given up, else 1 (2 if Redis had to be sent the
    /// script first).
    pub round_trips: u32,
}

/// Fences the given attempts (task, attempt given up), all in one script
/// call, unless a master with a newer term than `term` has announced
/// itself ([`announce_term`]): then Redis answers with an error.
pub async fn fence(
    con: &mut ConnectionManager,
    keys: &Keys,
    given_up: &[AttemptRef],
    ttl: Duration,
    term: u64,
) -> redis::RedisResult<Fenced> {
    if given_up.is_empty() {
        return Ok(Fenced::default());
    }
    let mut script_keys = Vec::with_capacity(given_up.len() * 3 + 1);
    let mut args = Vec::with_capacity(given_up.len() + 2);
    script_keys.push(keys.leader_term());
    args.push(ttl.as_millis().max(1) as u64);
    args.push(term);
    for a in given_up {
        script_keys.push(keys.task_owner(a.task));
        script_keys.push(keys.task_fence(a.task));
        script_keys.push(keys.task_report(*a));
        args.push(u64::from(a.attempt) + 1);
    }
    let (fenced, round_trips): (Vec<i64>, u32) =
        run_script(con, &FENCE, &script_keys, &args).await?;
    Ok(Fenced {
        verdicts: fenced.into_iter().map(|f| f == 1).collect(),
        round_trips,
    })
}

static FENCE: std::sync::LazyLock<FenceScript> = std::sync::LazyLock::new(|| {
    let source = include_str!("../lua/fence.lua");
    FenceScript {
        source,
        sha: redis::Script::new(source).get_hash().to_string(),
    }
});

/// A Lua script and its SHA1, under which Redis caches it.
struct FenceScript {
    source: &'static str,
    sha: String,
}

/// `EVALSHA`, falling back to `EVAL` (which caches the script) when Redis
/// does not know the script — its first use, or after Redis restarted.
/// `redis::Script::invoke_async` does the same with a `SCRIPT LOAD` in
/// between; done here so the round trips it takes can be counted.
async fn run_script<T: redis::FromRedisValue>(
    con: &mut ConnectionManager,
    script: &FenceScript,
    keys: &[String],
    args: &[u64],
) -> redis::RedisResult<(T, u32)> {
    let call = |command: &str, body: &str| {
        let mut cmd = redis::cmd(command);
        cmd.arg(body).arg(keys.len()).arg(keys).arg(args);
        cmd
    };
    match call("EVALSHA", &script.sha).query_async(con).await {
        Ok(value) => Ok((value, 1)),
        Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
            let value = call("EVAL", script.source).query_async(con).await?;
            Ok((value, 2))
        }
        Err(e) => Err(e),
    }
}

/// Removes recorded (or dangling) reports from Redis, in one pipeline.
/// Returns the round trips made: 0 when there is nothing to remove, else 1.
pub async fn forget_reports(
    con: &mut ConnectionManager,
    keys: &Keys,
    done: &[AttemptRef],
    garbage: &[String],
) -> redis::RedisResult<u32> {
    if done.is_empty() && garbage.is_empty() {
        return Ok(0);
    }
    let mut pipe = redis::pipe();
    let report_keys: Vec<String> = done.iter().map(|a| keys.task_report(*a)).collect();
    if !report_keys.is_empty() {
        pipe.del(report_keys).ignore();
    }
    let members: Vec<String> = done
        .iter()
        .map(|a| keys::attempt_value(*a))
        .chain(garbage.iter().cloned())
        .collect();
    pipe.srem(keys.pending_reports(), members).ignore();
    pipe.query_async::<()>(con).await?;
    Ok(1)
}

/// Announces a new leader's term, so that fences of older terms are
/// refused from now on. Returns the term Redis now holds: higher than
/// `term` if a newer leader announced itself first.
pub async fn announce_term(
    con: &mut ConnectionManager,
    keys: &Keys,
    term: u64,
) -> redis::RedisResult<u64> {
    static ANNOUNCE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
        redis::Script::new(
            "local cur = tonumber(redis.call('GET', KEYS[1]) or '0') \
             local mine = tonumber(ARGV[1]) \
             if cur < mine then redis.call('SET', KEYS[1], ARGV[1]) return mine end \
             return cur",
        )
    });
    ANNOUNCE
        .key(keys.leader_term())
        .arg(term)
        .invoke_async(con)
        .await
}

/// Reads the dataset's epoch and its grace, in one round trip.
pub async fn read_epoch(con: &mut ConnectionManager, keys: &Keys) -> redis::RedisResult<EpochSeen> {
    let (epoch, grace): (Option<String>, i64) = redis::pipe()
        .atomic()
        .get(keys.epoch())
        .pttl(keys.epoch_grace())
        .query_async(con)
        .await?;
    Ok(EpochSeen {
        epoch,
        grace_left: time_left(grace),
    })
}

/// Creates the dataset's epoch if Redis has none and, with `grace`, starts
/// the window in which missing leases prove nothing: both in one `MULTI`,
/// so no master can see the new epoch without its window. One round trip.
/// Returns the epoch now in Redis (another master's, if it won) and the
/// grace left.
pub async fn ensure_epoch(
    con: &mut ConnectionManager,
    keys: &Keys,
    grace: Option<Duration>,
) -> redis::RedisResult<EpochSeen> {
    let fresh = trainyard_proto::auth::ClusterSecret::generate_hex();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg(keys.epoch())
        .arg(&fresh)
        .arg("NX")
        .ignore();
    if let Some(grace) = grace {
        let ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX).max(1);
        pipe.cmd("SET")
            .arg(keys.epoch_grace())
            .arg(&fresh)
            .arg("PX")
            .arg(ms)
            .ignore();
    }
    let (epoch, left): (String, i64) = pipe
        .get(keys.epoch())
        .pttl(keys.epoch_grace())
        .query_async(con)
        .await?;
    Ok(EpochSeen {
        epoch: Some(epoch),
        grace_left: time_left(left),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_proto::HostId;
    use trainyard_testkit::RedisServer;

    async fn connect(redis: &RedisServer) -> ConnectionManager {
        redis::Client::open(redis.url())
            .unwrap()
            .get_connection_manager()
            .await
            .unwrap()
    }

    /// Writes the owner key of attempt 1 of tasks `1..=n`, as hosts do.
    async fn hold_leases(con: &mut ConnectionManager, keys: &Keys, n: u64) -> Vec<TaskId> {
        let tasks: Vec<TaskId> = (1..=n).collect();
        let mut pipe = redis::pipe();
        for task in &tasks {
            let worker = HostId::new(format!("h{}", task % 10))
                .unwrap()
                .worker((*task / 10) as u32);
            pipe.set(keys.task_owner(*task), keys::owner_value(&worker, 1))
                .ignore();
        }
        pipe.query_async::<()>(con).await.unwrap();
        tasks
    }

    #[tokio::test]
    async fn observing_2000_live_tasks_takes_as_few_round_trips_as_observing_10() {
        let redis = RedisServer::start();
        let mut con = connect(&redis).await;
        let keys = Keys::new("rt:");
        let tasks = hold_leases(&mut con, &keys, 2000).await;

        let few = observe(&mut con, &keys, &tasks[..10]).await.unwrap();
        let many = observe(&mut con, &keys, &tasks).await.unwrap();
        assert_eq!((few.round_trips, many.round_trips), (1, 1));
        assert_eq!(many.leases.len(), 2000);
        assert!(many
            .leases
            .values()
            .all(|l| matches!(l, Lease::Held { attempt: 1, .. })));

        // A pending report costs one more read, however many tasks are live.
        let _: () = redis::cmd("SADD")
            .arg(keys.pending_reports())
            .arg(keys::attempt_value(AttemptRef::new(5, 1)))
            .query_async(&mut con)
            .await
            .unwrap();
        let few = observe(&mut con, &keys, &tasks[..10]).await.unwrap();
        let many = observe(&mut con, &keys, &tasks).await.unwrap();
        assert_eq!((few.round_trips, many.round_trips), (2, 2));
        assert_eq!(many.dangling, vec![AttemptRef::new(5, 1)]);
    }

    #[tokio::test]
    async fn fencing_2000_lapsed_attempts_is_one_script_call_once_redis_has_the_script() {
        let redis = RedisServer::start();
        let mut con = connect(&redis).await;
        let keys = Keys::new("rt:");
        let lapsed: Vec<AttemptRef> = (1..=2000).map(|t| AttemptRef::new(t, 1)).collect();
        let ttl = Duration::from_secs(60);

        let first = fence(&mut con, &keys, &lapsed[..1000], ttl, 0)
            .await
            .unwrap();
        // Redis has never seen the script: EVALSHA is refused, EVAL caches it.
        assert_eq!(first.round_trips, 2);
        let second = fence(&mut con, &keys, &lapsed[1000..], ttl, 0)
            .await
            .unwrap();
        assert_eq!(second.round_trips, 1);
        assert!(first.verdicts.iter().chain(&second.verdicts).all(|f| *f));
        let fences: Vec<Option<u32>> = con
            .mget(vec![keys.task_fence(1), keys.task_fence(2000)])
            .await
            .unwrap();
        assert_eq!(fences, vec![Some(2), Some(2)]);
        assert_eq!(
            fence(&mut con, &keys, &[], ttl, 0)
                .await
                .unwrap()
                .round_trips,
            0
        );
    }

    #[tokio::test]
    async fn writing_a_lost_epoch_again_keeps_the_one_already_there() {
        let redis = RedisServer::start();
        let mut con = connect(&redis).await;
        let keys = Keys::new("rt:");
        let first = ensure_epoch(&mut con, &keys, None).await.unwrap();
        assert!(first.epoch.is_some());
        assert_eq!(first.grace_left, None, "no window asked for, none started");
        assert_eq!(ensure_epoch(&mut con, &keys, None).await.unwrap(), first);
    }

    #[tokio::test]
    async fn a_new_epochs_grace_is_in_redis_for_every_master_to_read_until_it_expires() {
        let redis = RedisServer::start();
        let mut con = connect(&redis).await;
        let keys = Keys::new("rt:");
        let grace = Duration::from_secs(60);
        let written = ensure_epoch(&mut con, &keys, Some(grace)).await.unwrap();
        let left = written.grace_left.expect("the window started");
        assert!(
            left > grace - Duration::from_secs(5) && left <= grace,
            "{left:?}"
        );

        // Another master, knowing nothing of this one, reads the same
        // window: from the snapshot of a sweep, or at start.
        let read = read_epoch(&mut con, &keys).await.unwrap();
        assert_eq!(read.epoch, written.epoch);
        assert!(read.grace_left.is_some_and(|l| l <= left));
        let swept = observe(&mut con, &keys, &[1]).await.unwrap();
        assert_eq!(swept.epoch.epoch, written.epoch);
        assert!(swept.epoch.grace_left.is_some());

        // Once it expires, the epoch stays and the window is over.
        let short = Keys::new("short:");
        ensure_epoch(&mut con, &short, Some(Duration::from_millis(30)))
            .await
            .unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let over = loop {
            let read = read_epoch(&mut con, &short).await.unwrap();
            if read.grace_left.is_none() || std::time::Instant::now() > until {
                break read;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            over.epoch.is_some() && over.grace_left.is_none(),
            "{over:?}"
        );
    }

    #[tokio::test]
    async fn a_deposed_master_fences_nothing_once_a_newer_term_is_announced() {
        let redis = RedisServer::start();
        let mut con = connect(&redis).await;
        let keys = Keys::new("rt:");
        let ttl = Duration::from_secs(60);
        assert_eq!(announce_term(&mut con, &keys, 3).await.unwrap(), 3);
        // Announcing an older term leaves the newer one in place.
        assert_eq!(announce_term(&mut con, &keys, 2).await.unwrap(), 3);

        let refused = fence(&mut con, &keys, &[AttemptRef::new(7, 1)], ttl, 2).await;
        let error = refused.expect_err("an older term's fence is refused");
        assert!(error.to_string().contains("DEPOSED"), "{error}");
        let untouched: Option<u32> = con.get(keys.task_fence(7)).await.unwrap();
        assert_eq!(untouched, None, "the deposed master's fence wrote nothing");

        let fenced = fence(&mut con, &keys, &[AttemptRef::new(7, 1)], ttl, 3).await;
        assert_eq!(fenced.unwrap().verdicts, vec![true]);
        let written: Option<u32> = con.get(keys.task_fence(7)).await.unwrap();
        assert_eq!(written, Some(2));
    }
}
