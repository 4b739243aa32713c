//! The lease layer against a real Redis: the original scheduler's
//! `testPersistTaskStartWritesBothKeys`, and the fencing that makes a stale
//! attempt harmless.

use redis::AsyncCommands;
use std::sync::Arc;
use std::time::Duration;
use trainyard_host::lease::{Acquired, LeaseLayer, Renewal};
use trainyard_host::process::Deadline;
use trainyard_proto::keys::Keys;
use trainyard_proto::messages::{AttemptReport, Outcome};
use trainyard_proto::redis_link::RedisLink;
use trainyard_proto::{AttemptRef, HostId, Timers};
use trainyard_testkit::RedisServer;

fn layer(redis: &RedisServer, host: &str, prefix: &str) -> LeaseLayer {
    let link = Arc::new(RedisLink::new(&redis.url(), Duration::from_secs(2)).unwrap());
    LeaseLayer::new(
        link,
        Keys::new(prefix),
        HostId::new(host).unwrap(),
        &Timers::default(),
    )
}

async fn con(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn report(host: &str, attempt: AttemptRef) -> AttemptReport {
    AttemptReport {
        attempt,
        host: HostId::new(host).unwrap(),
        slot: 0,
        outcome: Outcome::Completed {
            metrics: vec![],
            checkpoint: None,
            summary: None,
        },
        assignment: Default::default(),
        duration_ms: 1,
        finished_at_ms: 0,
        progress: None,
    }
}

#[tokio::test]
async fn taking_a_lease_writes_both_keys_and_the_report_clears_both() {
    let redis = RedisServer::start();
    let lease = layer(&redis, "worker-1", "");
    let worker = HostId::new("worker-1").unwrap().worker(0);
    let attempt = AttemptRef::new(123, 1);
    let before = Deadline::now();

    let granted = lease.acquire(&worker, attempt).await.unwrap();
    let Acquired::Granted { deadline } = granted else {
        panic!("{granted:?}")
    };
    // The host's view of the lease ends before Redis's: TTL minus the margin.
    let t = Timers::default();
    assert!(deadline <= before.checked_add(t.lease_ttl));
    assert!(
        deadline >= before.checked_add(t.lease_ttl - t.effective_margin() - Duration::from_secs(1))
    );

    let mut c = con(&redis).await;
    let owner: Option<String> = c.get("task:123:workerId").await.unwrap();
    let task: Option<String> = c.get("worker:worker-1/0:task").await.unwrap();
    assert_eq!(owner.as_deref(), Some("worker-1/0@1"));
    assert_eq!(task.as_deref(), Some("123@1"));
    let ttl: i64 = c.pttl("task:123:workerId").await.unwrap();
    assert!(ttl > 100_000 && ttl <= 120_000, "lease TTL {ttl} ms");

    lease
        .release(&worker, &report("worker-1", attempt))
        .await
        .unwrap();
    let owner: Option<String> = c.get("task:123:workerId").await.unwrap();
    let task: Option<String> = c.get("worker:worker-1/0:task").await.unwrap();
    assert_eq!((owner, task), (None, None));
    // The report waits in Redis for the master.
    let pending: Vec<String> = c.smembers("reports:pending").await.unwrap();
    assert_eq!(pending, vec!["123@1".to_string()]);
    let body: Vec<u8> = c.get("task:123:report:1").await.unwrap();
    let stored: AttemptReport = trainyard_proto::frame::decode(&body).unwrap();
    assert_eq!(stored, report("worker-1", attempt));
}

#[tokio::test]
async fn a_stale_attempts_release_never_deletes_the_newer_lease() {
    let redis = RedisServer::start();
    let (old, new) = (layer(&redis, "old", ""), layer(&redis, "new", ""));
    let (old_worker, new_worker) = (
        HostId::new("old").unwrap().worker(0),
        HostId::new("new").unwrap().worker(0),
    );
    assert!(matches!(
        old.acquire(&old_worker, AttemptRef::new(7, 1))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    // Attempt 2 takes over attempt 1's lease (the master gave attempt 1 up).
    assert!(matches!(
        new.acquire(&new_worker, AttemptRef::new(7, 2))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    // Attempt 1 cannot take it back.
    assert!(matches!(
        old.acquire(&old_worker, AttemptRef::new(7, 1))
            .await
            .unwrap(),
        Acquired::Held { .. }
    ));
    // Its late release leaves attempt 2's lease alone.
    old.release(&old_worker, &report("old", AttemptRef::new(7, 1)))
        .await
        .unwrap();
    let owner: Option<String> = con(&redis).await.get("task:7:workerId").await.unwrap();
    assert_eq!(owner.as_deref(), Some("new/0@2"));
    // And its renewal learns it was superseded.
    let (_, verdicts) = old
        .renew(&[(old_worker, AttemptRef::new(7, 1))])
        .await
        .unwrap();
    assert_eq!(verdicts, vec![Renewal::Superseded]);
}

#[tokio::test]
async fn a_fenced_attempt_can_neither_take_nor_rebuild_a_lease() {
    let redis = RedisServer::start();
    let lease = layer(&redis, "h", "");
    let worker = HostId::new("h").unwrap().worker(0);
    let _: () = con(&redis).await.set("task:9:fence", 2).await.unwrap();
    assert_eq!(
        lease.acquire(&worker, AttemptRef::new(9, 1)).await.unwrap(),
        Acquired::Fenced { fence: 2 }
    );
    let (_, verdicts) = lease
        .renew(&[(worker.clone(), AttemptRef::new(9, 1))])
        .await
        .unwrap();
    assert_eq!(verdicts, vec![Renewal::Fenced]);
    let owner: Option<String> = con(&redis).await.get("task:9:workerId").await.unwrap();
    assert_eq!(owner, None);
    assert!(matches!(
        lease.acquire(&worker, AttemptRef::new(9, 2)).await.unwrap(),
        Acquired::Granted { .. }
    ));
}

#[tokio::test]
async fn leases_lost_with_redis_data_are_rebuilt_by_the_next_renewal_but_not_after_the_report() {
    let mut redis = RedisServer::start();
    let lease = layer(&redis, "h", "ty:");
    let worker = HostId::new("h").unwrap().worker(1);
    let running = AttemptRef::new(5, 1);
    lease.acquire(&worker, running).await.unwrap();
    redis.restart_empty();
    // The link reconnects by itself.
    let mut renewed = None;
    for _ in 0..50 {
        if let Ok(r) = lease.renew(&[(worker.clone(), running)]).await {
            renewed = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, verdicts) = renewed.expect("renewal after the restart");
    assert_eq!(verdicts, vec![Renewal::Rebuilt]);
    let owner: Option<String> = con(&redis).await.get("ty:task:5:workerId").await.unwrap();
    assert_eq!(owner.as_deref(), Some("h/1@1"));
    let hb: Option<String> = con(&redis).await.get("ty:worker:h:hb").await.unwrap();
    assert_eq!(hb.as_deref(), Some("h"));

    // Once reported, a renewal racing the release does not resurrect it.
    lease.release(&worker, &report("h", running)).await.unwrap();
    let (_, verdicts) = lease.renew(&[(worker, running)]).await.unwrap();
    assert_eq!(verdicts, vec![Renewal::Finished]);
    let owner: Option<String> = con(&redis).await.get("ty:task:5:workerId").await.unwrap();
    assert_eq!(owner, None);
}

#[tokio::test]
async fn a_dead_redis_is_an_error_not_a_lease() {
    let mut redis = RedisServer::start();
    let lease = layer(&redis, "h", "");
    redis.kill();
    let err = lease
        .acquire(&HostId::new("h").unwrap().worker(0), AttemptRef::new(1, 1))
        .await;
    assert!(err.is_err(), "{err:?}");
}

#[tokio::test]
async fn abandoning_takes_back_only_the_attempts_own_lease() {
    let redis = RedisServer::start();
    let (a, b) = (layer(&redis, "a", ""), layer(&redis, "b", ""));
    let (wa, wb) = (
        HostId::new("a").unwrap().worker(0),
        HostId::new("b").unwrap().worker(0),
    );
    let first = AttemptRef::new(9, 1);
    // An acquire Redis applied but whose reply the host never saw.
    assert!(matches!(
        a.acquire(&wa, first).await.unwrap(),
        Acquired::Granted { .. }
    ));
    assert!(
        a.abandon(&wa, first).await.unwrap(),
        "there was a lease to take back"
    );
    let mut c = con(&redis).await;
    let owner: Option<String> = c.get("task:9:workerId").await.unwrap();
    let task: Option<String> = c.get("worker:a/0:task").await.unwrap();
    assert_eq!((owner, task), (None, None));
    // So the next attempt can run at once, instead of after a lease TTL.
    let second = AttemptRef::new(9, 2);
    assert!(matches!(
        b.acquire(&wb, second).await.unwrap(),
        Acquired::Granted { .. }
    ));
    // A late abandon of the first attempt leaves the second's lease alone.
    assert!(!a.abandon(&wa, first).await.unwrap());
    let owner: Option<String> = c.get("task:9:workerId").await.unwrap();
    assert_eq!(owner.as_deref(), Some("b/0@2"));
}

#[tokio::test]
async fn attempts_starting_together_each_get_their_own_verdict() {
    let redis = RedisServer::start();
    let lease = layer(&redis, "h", "");
    let host = HostId::new("h").unwrap();
    let mut c = con(&redis).await;
    let _: () = c.set("task:1:fence", 3).await.unwrap();
    let _: () = c.set("task:2:workerId", "other/0@5").await.unwrap();

    // Fenced, held by a newer attempt, and 30 free ones, all at once.
    let mut wanted = vec![
        (host.worker(0), AttemptRef::new(1, 2)),
        (host.worker(1), AttemptRef::new(2, 4)),
    ];
    wanted.extend((0..30).map(|i| (host.worker(2 + i), AttemptRef::new(100 + u64::from(i), 1))));
    let scripts_before = script_calls(&mut c).await;
    let answers = futures::future::join_all(
        wanted
            .iter()
            .map(|(worker, attempt)| lease.acquire(worker, *attempt)),
    )
    .await;

    assert_eq!(answers[0].as_ref().unwrap(), &Acquired::Fenced { fence: 3 });
    assert_eq!(
        answers[1].as_ref().unwrap(),
        &Acquired::Held {
            by: "other/0@5".into()
        }
    );
    for ((worker, attempt), answer) in wanted.iter().zip(&answers).skip(2) {
        assert!(
            matches!(answer, Ok(Acquired::Granted { .. })),
            "{attempt}: {answer:?}"
        );
        let owner: Option<String> = c
            .get(format!("task:{}:workerId", attempt.task))
            .await
            .unwrap();
        assert_eq!(owner, Some(format!("h/{}@1", worker.slot)));
    }
    let untouched: Option<String> = c.get("task:1:workerId").await.unwrap();
    assert_eq!(untouched, None, "a fenced attempt writes nothing");
    // One call carried them all (two if Redis first had to be sent the
    // script), not one per attempt.
    let calls = script_calls(&mut c).await - scripts_before;
    assert!(calls <= 2, "{calls} script calls for 32 acquisitions");
}

#[tokio::test]
async fn attempts_ending_together_release_in_one_call_and_each_report_is_stored() {
    let redis = RedisServer::start();
    let lease = layer(&redis, "h", "");
    let host = HostId::new("h").unwrap();
    let ended: Vec<_> = (0..32)
        .map(|i| (host.worker(i), AttemptRef::new(200 + u64::from(i), 1)))
        .collect();
    for (worker, attempt) in &ended {
        let granted = lease.acquire(worker, *attempt).await.unwrap();
        assert!(matches!(granted, Acquired::Granted { .. }), "{granted:?}");
    }
    // The first attempt's task has moved on to attempt 2 elsewhere.
    let mut c = con(&redis).await;
    let _: () = c.set("task:200:workerId", "other/0@2").await.unwrap();

    let scripts_before = script_calls(&mut c).await;
    let reports: Vec<_> = ended.iter().map(|(_, a)| report("h", *a)).collect();
    let released = futures::future::join_all(
        ended
            .iter()
            .zip(&reports)
            .map(|((worker, _), report)| lease.release(worker, report)),
    )
    .await;

    for ((worker, attempt), (released, sent)) in ended.iter().zip(released.iter().zip(&reports)) {
        assert!(released.is_ok(), "{attempt}: {released:?}");
        let body: Vec<u8> = c
            .get(format!("task:{}:report:1", attempt.task))
            .await
            .unwrap();
        let stored: AttemptReport = trainyard_proto::frame::decode(&body).unwrap();
        assert_eq!(&stored, sent);
        let task: Option<String> = c
            .get(format!("worker:h/{}:task", worker.slot))
            .await
            .unwrap();
        assert_eq!(task, None, "{attempt}'s worker key is cleared");
    }
    for attempt in ended.iter().skip(1).map(|(_, a)| a) {
        let owner: Option<String> = c
            .get(format!("task:{}:workerId", attempt.task))
            .await
            .unwrap();
        assert_eq!(owner, None, "{attempt}'s lease is cleared");
    }
    let newer: Option<String> = c.get("task:200:workerId").await.unwrap();
    assert_eq!(newer.as_deref(), Some("other/0@2"), "a newer lease is kept");
    let mut pending: Vec<String> = c.smembers("reports:pending").await.unwrap();
    pending.sort();
    let mut expected: Vec<String> = ended.iter().map(|(_, a)| format!("{}@1", a.task)).collect();
    expected.sort();
    assert_eq!(pending, expected);
    // One call carried them all (two if Redis first had to be sent the
    // script), not one per attempt.
    let calls = script_calls(&mut c).await - scripts_before;
    assert!(calls <= 2, "{calls} script calls for 32 releases");
}

/// Script calls Redis has served (`EVALSHA` and `EVAL`, failed ones too).
async fn script_calls(c: &mut redis::aio::MultiplexedConnection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
