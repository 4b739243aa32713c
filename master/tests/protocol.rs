//! The master against hosts speaking the wire protocol directly: real TCP,
//! real frames, a real master (SQLite, Redis) — and peers that misbehave on
//! purpose. Each test checks what the master's state becomes, not only that
//! it did not crash.

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use redis::AsyncCommands;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use trainyard_master::config::MasterConfig;
use trainyard_master::model::{AttemptOutcome, NewTask, TaskStatus};
use trainyard_master::{start, RunningMaster};
use trainyard_proto::auth::{nonce, ClusterSecret};
use trainyard_proto::frame::MessageCodec;
use trainyard_proto::messages::*;
use trainyard_proto::{AttemptRef, HostId, Timers, PROTOCOL_VERSION};
use trainyard_testkit::{fresh_sqlite, Database, RedisServer};

const SECRET: &[u8] = b"protocol-test-cluster-secret";
const WAIT: Duration = Duration::from_secs(20);

fn timers() -> Timers {
    Timers {
        heartbeat_interval: Duration::from_millis(100),
        heartbeat_ttl: Duration::from_millis(300),
        lease_ttl: Duration::from_millis(500),
        lease_safety_margin: Duration::from_millis(100),
        sweep_interval: Duration::from_millis(100),
        dispatch_ack_timeout: Duration::from_secs(2),
        handshake_timeout: Duration::from_millis(700),
        idle_timeout: Duration::from_millis(800),
        ..Timers::default()
    }
}

struct Setup {
    master: RunningMaster,
    db: Database,
    /// Kept alive for the master's lifetime.
    _redis: RedisServer,
}

async fn master_with(configure: impl FnOnce(&mut MasterConfig), redis: RedisServer) -> Setup {
    let db = fresh_sqlite();
    let mut config = MasterConfig::local(
        &db.url,
        &redis.url(),
        ClusterSecret::new(SECRET.to_vec()).unwrap(),
        "token",
    );
    config.timers = timers();
    config.known_adapters = vec!["noop".into()];
    configure(&mut config);
    Setup {
        master: start(config).await.expect("master starts"),
        db,
        _redis: redis,
    }
}

async fn master() -> Setup {
    master_with(|_| {}, RedisServer::start()).await
}

type Frames = Framed<TcpStream, MessageCodec<MasterMessage, HostMessage>>;

/// A host speaking the protocol by hand.
struct FakeHost {
    id: HostId,
    frames: Frames,
}

impl FakeHost {
    async fn connect(s: &Setup, id: &str, running: Vec<RunningAttempt>) -> FakeHost {
        Self::connect_with(s, id, running, SECRET)
            .await
            .expect("welcomed")
    }

    async fn connect_with(
        s: &Setup,
        id: &str,
        running: Vec<RunningAttempt>,
        secret: &[u8],
    ) -> Result<FakeHost, String> {
        let stream = TcpStream::connect(s.master.hosts_addr).await.unwrap();
        let mut frames = Framed::new(stream, MessageCodec::new(1 << 20));
        let Some(Ok(MasterMessage::Challenge(challenge))) = frames.next().await else {
            return Err("no challenge".into());
        };
        let secret = ClusterSecret::new(secret.to_vec()).unwrap();
        let host_nonce = nonce();
        let hello = Hello {
            protocol: PROTOCOL_VERSION,
            host_id: HostId::new(id).unwrap(),
            slots: 1,
            adapters: vec![AdapterInfo {
                name: "noop".into(),
                version: "0".into(),
                kinds: vec!["noop".into()],
                ..Default::default()
            }],
            running,
            capacity: Default::default(),
            proof: secret.host_proof(&challenge.nonce, &host_nonce, id, &[]),
            nonce: host_nonce,
            agent: "fake".into(),
            containment: vec![],
        };
        frames.send(HostMessage::Hello(hello)).await.unwrap();
        match frames.next().await {
            Some(Ok(MasterMessage::Welcome(_))) => Ok(FakeHost {
                id: HostId::new(id).unwrap(),
                frames,
            }),
            Some(Ok(MasterMessage::Refused { reason })) => Err(reason),
            other => Err(format!("{other:?}")),
        }
    }

    async fn send(&mut self, m: HostMessage) {
        self.frames.send(m).await.unwrap();
    }

    /// The next message matching `want`, skipping heartbeat acks and the like.
    async fn expect(&mut self, what: &str, want: impl Fn(&MasterMessage) -> bool) -> MasterMessage {
        let until = Instant::now() + WAIT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.frames.next()).await {
                Ok(Some(Ok(m))) if want(&m) => return m,
                Ok(Some(Ok(_))) => continue,
                other => panic!("{}: waiting for {what}, got {other:?}", self.id),
            }
        }
    }

    async fn heartbeat(&mut self, running: Vec<RunningAttempt>) {
        self.send(HostMessage::Heartbeat {
            running,
            environments: vec![],
        })
        .await;
    }
}

async fn submit_noop(s: &Setup) -> u64 {
    let ids = s
        .master
        .scheduler
        .submit(vec![NewTask {
            name: None,
            adapter: "noop".into(),
            version: None,
            kind: String::new(),
            params: "{}".into(),
            priority: 0,
            max_attempts: 5,
            timeout_secs: None,
            progress_timeout_secs: None,
            resources: Default::default(),
            team: "default".into(),
        }])
        .await
        .unwrap();
    ids[0]
}

async fn status(s: &Setup, id: u64) -> (TaskStatus, u32, Option<String>) {
    let store = trainyard_master::store::Store::connect(&s.db.url)
        .await
        .unwrap();
    let t = store.task(id).await.unwrap().unwrap().task;
    (t.status, t.attempt, t.host)
}

async fn wait_status(s: &Setup, id: u64, want: TaskStatus) -> (TaskStatus, u32, Option<String>) {
    let until = Instant::now() + WAIT;
    loop {
        let st = status(s, id).await;
        if st.0 == want {
            return st;
        }
        assert!(Instant::now() < until, "task {id} never {want}: {st:?}");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

fn dispatch_of(m: &MasterMessage) -> Option<AttemptRef> {
    match m {
        MasterMessage::Dispatch(d) => Some(d.attempt),
        _ => None,
    }
}

fn running(attempt: AttemptRef) -> Vec<RunningAttempt> {
    vec![RunningAttempt {
        attempt,
        slot: 0,
        leased: true,
        assignment: Default::default(),
    }]
}

/// An attempt in a slot whose host is still taking its lease.
fn taking_the_lease(attempt: AttemptRef) -> Vec<RunningAttempt> {
    vec![RunningAttempt {
        leased: false,
        ..running(attempt).remove(0)
    }]
}

fn report(host: &str, attempt: AttemptRef) -> HostMessage {
    HostMessage::Report(AttemptReport {
        attempt,
        host: HostId::new(host).unwrap(),
        slot: 0,
        outcome: Outcome::Completed {
            metrics: vec![Metric {
                name: "forged".into(),
                value: 1.0,
            }],
            checkpoint: None,
            summary: None,
        },
        assignment: Default::default(),
        duration_ms: 1,
        finished_at_ms: 0,
        progress: None,
    })
}

#[tokio::test]
async fn a_reconnecting_host_running_an_attempt_that_was_given_away_is_told_to_stop() {
    // The fake hosts are silent between steps and accept late: on a loaded
    // machine the short idle and acceptance timeouts would cut them off.
    let s = master_with(
        |c| {
            c.timers.idle_timeout = Duration::from_secs(30);
            c.timers.dispatch_ack_timeout = Duration::from_secs(15);
        },
        RedisServer::start(),
    )
    .await;
    let mut a = FakeHost::connect(&s, "host-a", vec![]).await;
    let id = submit_noop(&s).await;
    let d = a.expect("dispatch", |m| dispatch_of(m).is_some()).await;
    let first = dispatch_of(&d).unwrap();
    // Accepted, but (being fake) it never writes the lease: the sweep sees
    // the lease lapse and gives the attempt away.
    a.send(HostMessage::Accepted {
        attempt: first,
        slot: 0,
        assignment: Default::default(),
    })
    .await;
    wait_status(&s, id, TaskStatus::Pending).await;
    // RUNNING lasts one sweep; the attempt's record shows it was.
    let store = trainyard_master::store::Store::connect(&s.db.url)
        .await
        .unwrap();
    let detail = store.task(id).await.unwrap().unwrap();
    let given_up = &detail.attempts[0];
    assert!(given_up.started_at_ms.is_some(), "{given_up:?}");
    assert_eq!(
        given_up.outcome,
        Some(AttemptOutcome::LeaseLost),
        "{given_up:?}"
    );
    let mut b = FakeHost::connect(&s, "host-b", vec![]).await;
    let second = dispatch_of(&b.expect("dispatch", |m| dispatch_of(m).is_some()).await).unwrap();
    assert_eq!(second, AttemptRef::new(id, 2));

    // host-a comes back still running attempt 1.
    drop(a);
    let mut a = FakeHost::connect(&s, "host-a", running(first)).await;
    let stop = a
        .expect("stop", |m| matches!(m, MasterMessage::Stop { .. }))
        .await;
    let MasterMessage::Stop { attempt, reason } = stop else {
        unreachable!()
    };
    assert_eq!(attempt, first);
    assert!(reason.contains("superseded by attempt 2"), "{reason}");
    // Its late report of attempt 1 is acknowledged and changes nothing.
    a.send(report("host-a", first)).await;
    a.expect("ack", |m| matches!(m, MasterMessage::ReportAck { .. }))
        .await;
    assert_eq!(status(&s, id).await.0, TaskStatus::Dispatched);
    // host-b takes attempt 2's lease, as a real host does before accepting,
    // so the attempt stays RUNNING until its report however slow the turn.
    take_lease(&s, "host-b", second).await;
    b.send(HostMessage::Accepted {
        attempt: second,
        slot: 0,
        assignment: Default::default(),
    })
    .await;
    b.send(report("host-b", second)).await;
    assert_eq!(wait_status(&s, id, TaskStatus::Completed).await.1, 2);
}

#[tokio::test]
async fn a_stale_lease_found_at_start_up_has_its_host_told_to_stop() {
    let redis = RedisServer::start();
    // A lease of task 77's attempt 1, left by a host from before the restart;
    // the database knows no such live attempt.
    let mut con = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = con.set("worker:host-z/0:task", "77@1").await.unwrap();
    let _: () = con.set("task:77:workerId", "host-z/0@1").await.unwrap();
    let s = master_with(|_| {}, redis).await;
    let mut z = FakeHost::connect(&s, "host-z", vec![]).await;
    let stop = z
        .expect("stop", |m| matches!(m, MasterMessage::Stop { .. }))
        .await;
    assert!(
        matches!(stop, MasterMessage::Stop { attempt, .. } if attempt == AttemptRef::new(77, 1))
    );
}

/// Writes the lease of `attempt` in slot 0 of `host` for a minute, as a
/// real host does before it accepts: the sweep then keeps the attempt
/// RUNNING however slow the test.
async fn take_lease(s: &Setup, host: &str, attempt: AttemptRef) {
    let mut con = redis::Client::open(s._redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let options = redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000));
    let (id, n) = (attempt.task, attempt.attempt);
    let _: () = con
        .set_options(
            format!("worker:{host}/0:task"),
            format!("{id}@{n}"),
            options,
        )
        .await
        .unwrap();
    let _: () = con
        .set_options(
            format!("task:{id}:workerId"),
            format!("{host}/0@{n}"),
            options,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn reports_for_tasks_a_host_was_never_given_change_nothing() {
    let s = master().await;
    let mut a = FakeHost::connect(&s, "host-a", vec![]).await;
    let id = submit_noop(&s).await;
    let attempt = dispatch_of(&a.expect("dispatch", |m| dispatch_of(m).is_some()).await).unwrap();
    take_lease(&s, "host-a", attempt).await;
    a.send(HostMessage::Accepted {
        attempt,
        slot: 0,
        assignment: Default::default(),
    })
    .await;
    wait_status(&s, id, TaskStatus::Running).await;

    // Another host reports a's task, in its own name and in a's name.
    let mut b = FakeHost::connect(&s, "host-b", vec![]).await;
    b.send(report("host-b", attempt)).await;
    b.send(report("host-a", attempt)).await;
    // And a report of a task nobody was given.
    b.send(report("host-b", AttemptRef::new(9999, 1))).await;
    b.heartbeat(vec![]).await;
    b.expect("heartbeat ack", |m| {
        matches!(m, MasterMessage::HeartbeatAck)
    })
    .await;
    let (st, att, host) = status(&s, id).await;
    assert_eq!(
        (st, att, host.as_deref()),
        (TaskStatus::Running, 1, Some("host-a"))
    );

    // The real owner's report completes it.
    a.send(report("host-a", attempt)).await;
    wait_status(&s, id, TaskStatus::Completed).await;
}

/// A host lists an attempt whose lease it is still taking (Redis slow, or
/// just restarted): the attempt has not started, so the master must not
/// count it as a run nor give it up as a lapsed lease. Without a lease it is
/// an undelivered dispatch once the acknowledgement time is out.
#[tokio::test]
async fn an_attempt_still_taking_its_lease_has_not_started() {
    let s = master().await;
    let mut a = FakeHost::connect(&s, "host-a", vec![]).await;
    let id = submit_noop(&s).await;
    let first = dispatch_of(&a.expect("dispatch", |m| dispatch_of(m).is_some()).await).unwrap();
    a.heartbeat(taking_the_lease(first)).await;
    a.expect("heartbeat ack", |m| {
        matches!(m, MasterMessage::HeartbeatAck)
    })
    .await;
    let store = trainyard_master::store::Store::connect(&s.db.url)
        .await
        .unwrap();
    let until = Instant::now() + WAIT;
    let ended = loop {
        // Keep saying so, as a host does every heartbeat.
        a.heartbeat(taking_the_lease(first)).await;
        let detail = store.task(id).await.unwrap().unwrap();
        if let Some(ended) = detail
            .attempts
            .iter()
            .find(|t| t.attempt == 1 && t.outcome.is_some())
        {
            break ended.clone();
        }
        assert!(Instant::now() < until, "attempt 1 never ended: {detail:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        ended.outcome,
        Some(AttemptOutcome::Undelivered),
        "{ended:?}"
    );
    assert_eq!(ended.started_at_ms, None, "{ended:?}");
}

#[tokio::test]
async fn a_wrong_secret_is_refused_and_gains_nothing() {
    let s = master().await;
    let err = FakeHost::connect_with(&s, "intruder", vec![], b"not-the-cluster-secret")
        .await
        .err()
        .expect("refused");
    assert!(err.contains("authentication failed"), "{err}");
    let hosts = s.master.scheduler.hosts().await.unwrap();
    assert!(hosts.is_empty(), "{hosts:?}");
    // Tasks submitted now are not dispatched to anyone: once the scheduler
    // has had two more turns (each places what it can), the task still waits.
    let id = submit_noop(&s).await;
    let submitted = s.master.scheduler.overview().await.unwrap().turns;
    let until = Instant::now() + WAIT;
    while s.master.scheduler.overview().await.unwrap().turns < submitted + 2 {
        assert!(Instant::now() < until, "the scheduler stopped taking turns");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status(&s, id).await.0, TaskStatus::Pending);
}

/// Reads until the master closes the connection; fails if it stays open.
async fn closed_within(stream: &mut TcpStream, timeout: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let until = Instant::now() + timeout;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn strangers_that_send_garbage_are_cut_off_without_harming_connected_hosts() {
    // host-a stays quiet during the test; it must not be idle-timed out.
    let s = master_with(
        |c| c.timers.idle_timeout = Duration::from_secs(30),
        RedisServer::start(),
    )
    .await;
    let mut a = FakeHost::connect(&s, "host-a", vec![]).await;

    // A heartbeat before any handshake.
    let mut early = Framed::new(
        TcpStream::connect(s.master.hosts_addr).await.unwrap(),
        MessageCodec::<MasterMessage, HostMessage>::new(1 << 20),
    );
    early.next().await;
    early
        .send(HostMessage::Heartbeat {
            running: vec![],
            environments: vec![],
        })
        .await
        .unwrap();
    assert!(matches!(
        early.next().await,
        Some(Ok(MasterMessage::Refused { .. }))
    ));
    // Garbage bytes.
    let mut garbage = TcpStream::connect(s.master.hosts_addr).await.unwrap();
    garbage
        .write_all(&[0, 0, 0, 8, 0xc1, 0xc1, 0xc1, 0xc1, 0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    assert!(closed_within(&mut garbage, Duration::from_secs(5)).await);
    // A frame declaring 4 GiB: cut off at once, not after 4 GiB.
    let mut huge = TcpStream::connect(s.master.hosts_addr).await.unwrap();
    huge.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    assert!(closed_within(&mut huge, Duration::from_secs(5)).await);
    // A truncated frame, then silence: the handshake timeout closes it.
    let mut truncated = TcpStream::connect(s.master.hosts_addr).await.unwrap();
    truncated.write_all(&[0, 0, 0, 100, 1, 2, 3]).await.unwrap();
    assert!(closed_within(&mut truncated, Duration::from_secs(5)).await);
    // A silent peer too.
    let mut silent = TcpStream::connect(s.master.hosts_addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);

    // The real host is untouched and still gets work.
    let id = submit_noop(&s).await;
    let attempt = dispatch_of(&a.expect("dispatch", |m| dispatch_of(m).is_some()).await).unwrap();
    assert_eq!(attempt, AttemptRef::new(id, 1));
    let hosts = s.master.scheduler.hosts().await.unwrap();
    assert_eq!(
        hosts.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
        vec!["host-a"]
    );
    // After the handshake, a garbage frame closes that host's connection only.
    let mut bytes = BytesMut::new();
    bytes.extend_from_slice(&[0, 0, 0, 2, 0xc1, 0xc1]);
    a.frames.get_mut().write_all(&bytes).await.unwrap();
    assert!(closed_within(a.frames.get_mut(), Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_silent_host_is_disconnected_after_the_idle_timeout() {
    let s = master().await;
    let mut a = FakeHost::connect(&s, "host-a", vec![]).await;
    assert!(closed_within(a.frames.get_mut(), Duration::from_secs(5)).await);
    let until = Instant::now() + WAIT;
    while !s.master.scheduler.hosts().await.unwrap().is_empty() {
        assert!(Instant::now() < until, "the silent host stayed registered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused() {
    let s = master_with(|c| c.max_connections = 2, RedisServer::start()).await;
    let _a = FakeHost::connect(&s, "host-a", vec![]).await;
    let _b = FakeHost::connect(&s, "host-b", vec![]).await;
    let mut third = TcpStream::connect(s.master.hosts_addr).await.unwrap();
    assert!(
        closed_within(&mut third, Duration::from_millis(1500)).await,
        "a third connection was kept open"
    );
}
