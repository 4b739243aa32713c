//! Standby masters on PostgreSQL, through real processes: three masters on
//! one database and one Redis, hosts and the API client configured with all
//! three. The leader is killed (SIGKILL), paused past its lease (SIGSTOP),
//! or cut off from the database alone; a standby takes over within the
//! leader lease's TTL plus a second, running tasks keep running, and every
//! task completes exactly once.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{
    assert_attempts_never_overlapped, leadership, logged, read_trace, serial, Leadership, Setup,
    Standbys, TestCluster,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use trainyard_master::model::{AttemptOutcome, TaskStatus};

/// The leader lease of these tests.
const TTL: Duration = Duration::from_secs(3);
const WAIT: Duration = Duration::from_secs(90);

/// The test timers with a lease long enough to outlive a failover: a host
/// finds the new leader after its idle timeout (3 s) on the old one, a
/// handshake timeout (3 s) if the old one's socket still accepts (paused),
/// and the leader lease ([`TTL`]) — all before its own lease runs out.
fn ha_timers() -> trainyard_proto::Timers {
    trainyard_proto::Timers {
        lease_ttl: Duration::from_secs(16),
        lease_safety_margin: Duration::from_secs(1),
        ..common::test_timers()
    }
}

/// Three masters: the cluster's own (`master`) and two standbys.
struct Fleet {
    c: TestCluster,
    /// Each master's API base URL, `master` first.
    apis: Vec<String>,
    standbys: Standbys,
    /// Between `master` and the database, when asked for.
    relay: Option<Relay>,
}

impl Fleet {
    /// A cluster on PostgreSQL whose hosts and client know three masters;
    /// `master` starts first (and leads), then two standbys, then `hosts`
    /// hosts with two slots each. With `relay`, `master` reaches the
    /// database through a [`Relay`].
    async fn start(hosts: usize, relay: bool) -> Fleet {
        let mut setup = Setup::new("postgres");
        setup.slots = 2;
        setup.timers = ha_timers();
        let mut c = TestCluster::prepare(setup).await;
        let mut standbys = c.plan_standbys(2, TTL);
        let direct = c.cluster.settings.database_url.clone();
        let relay = match relay {
            false => None,
            true => {
                let target = direct
                    .split('@')
                    .nth(1)
                    .and_then(|rest| rest.split('/').next())
                    .expect("host:port in the database URL")
                    .to_string();
                let relay = Relay::start(target.clone()).await;
                c.cluster.settings.database_url =
                    direct.replace(&target, &format!("127.0.0.1:{}", relay.port));
                c.cluster.write_config().expect("config");
                Some(relay)
            }
        };
        c.start_master().await;
        c.start_standbys(&mut standbys, &direct).await;
        for i in 1..=hosts {
            c.start_host(&format!("host-{i}"));
        }
        c.wait_for_hosts(hosts).await;
        Fleet {
            apis: standbys.apis.clone(),
            c,
            standbys,
            relay,
        }
    }

    /// The term of the master that leads now, once some master reports it.
    async fn term(&self) -> i64 {
        let until = Instant::now() + WAIT;
        loop {
            for api in &self.apis {
                if let Some(Leadership {
                    term: Some(t),
                    role,
                    ..
                }) = leadership(api).await
                {
                    if role == "leader" {
                        return t;
                    }
                }
            }
            assert!(Instant::now() < until, "no master leads\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until a standby reports a leader newer than `old` (or the new
    /// leader reports itself); returns how long that took and its API URL.
    async fn new_leader(&self, old: i64, since: Instant) -> (Duration, String) {
        loop {
            for api in &self.apis[1..] {
                if let Some(seen) = leadership(api).await {
                    if seen.term.is_some_and(|t| t > old) {
                        let leader = seen.leader_api.unwrap_or_else(|| api.clone());
                        return (since.elapsed(), leader);
                    }
                }
            }
            assert!(
                since.elapsed() < WAIT,
                "no standby took over\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn logs(&self) -> String {
        self.c.all_logs() + &self.standbys.logs()
    }

    /// Submits through whichever master answers, retrying while none
    /// leads (during a failover).
    async fn submit(&self, task: Value) -> u64 {
        let until = Instant::now() + WAIT;
        loop {
            match self.c.client().submit(&task).await {
                Ok(id) => return id,
                Err(e) => assert!(
                    Instant::now() < until,
                    "cannot submit: {e:#}\n{}",
                    self.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for a task to complete, whichever master answers.
    async fn completed(&self, id: u64) -> trainyard_master::model::TaskDetail {
        let until = Instant::now() + WAIT;
        loop {
            if let Ok(d) = self.c.client().task(id).await {
                if d.task.status == TaskStatus::Completed {
                    return d;
                }
                assert!(
                    !d.task.status.is_terminal(),
                    "task {id} ended {}: {:#?}\n{}",
                    d.task.status,
                    d,
                    self.logs()
                );
            }
            assert!(
                Instant::now() < until,
                "task {id} not completed\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn long_task(trace: &str) -> Value {
    json!({"adapter": "test-trainer", "params": {"episodes": 500, "step_delay_ms": 10, "trace_file": trace}})
}

/// Long tasks running across the failover: each ran once, on one attempt.
async fn assert_ran_once(f: &Fleet, long: &[(u64, String)]) {
    for (id, trace) in long {
        let done = f.completed(*id).await;
        assert_eq!(
            done.attempts.len(),
            1,
            "task {id} was requeued although it was alive: {:?}\n{}",
            done.attempts,
            f.logs()
        );
        let events = read_trace(&f.c.trace(trace));
        assert_eq!(
            events.iter().filter(|e| e.event == "start").count(),
            1,
            "task {id} ran twice"
        );
        assert_attempts_never_overlapped(&events);
    }
}

#[tokio::test]
async fn killing_the_leader_under_load_hands_over_within_the_lease_and_loses_nothing() {
    let _serial = serial();
    let mut f = Fleet::start(2, false).await;
    let before = f.term().await;
    let mut long = vec![];
    for i in 0..3 {
        let trace = format!("long-{i}.jsonl");
        long.push((f.submit(long_task(&trace)).await, trace));
    }
    for (id, _) in &long {
        f.c.wait_for(*id, WAIT, "running", |d| {
            d.task.status == TaskStatus::Running && d.task.progress.is_some()
        })
        .await;
    }
    let mut short = vec![];
    for _ in 0..20 {
        short.push(f.submit(json!({"adapter": "noop", "params": {}})).await);
    }

    let killed = Instant::now();
    f.c.master().kill();
    let (took, leader) = f.new_leader(before, killed).await;
    assert!(
        took <= TTL + Duration::from_secs(1),
        "a standby led {took:?} after the leader was killed (lease {TTL:?})\n{}",
        f.logs()
    );
    assert_ne!(leader, f.apis[0], "the dead master cannot lead");
    eprintln!("leader killed: a standby led {took:?} later");
    for _ in 0..20 {
        short.push(f.submit(json!({"adapter": "noop", "params": {}})).await);
    }
    f.c.wait_for_hosts(2).await;
    // The CLI, given every master, finds the leader and says which it is.
    let health = f.c.cli(&["health"]);
    assert!(health.contains(&format!("at {leader}")), "{health}");
    let hosts = f.c.cli(&["hosts"]);
    assert!(hosts.contains(&format!("at {leader}")), "{hosts}");
    for id in &short {
        let done = f.completed(*id).await;
        // A dispatch the dead leader recorded but never sent is given up
        // by its successor (it never ran); nothing else may be repeated.
        let ran = done.attempts.iter().filter(|a| a.started_at_ms.is_some());
        assert_eq!(ran.count(), 1, "task {id}: {:?}", done.attempts);
        assert!(
            done.attempts.iter().all(
                |a| a.started_at_ms.is_some() || a.outcome == Some(AttemptOutcome::Undelivered)
            ),
            "task {id}: {:?}",
            done.attempts
        );
    }
    assert_ran_once(&f, &long).await;
}

#[tokio::test]
async fn a_leader_paused_past_its_lease_is_replaced_and_steps_down_when_it_wakes() {
    let _serial = serial();
    let mut f = Fleet::start(1, false).await;
    let before = f.term().await;
    let trace = "long.jsonl".to_string();
    let long = vec![(f.submit(long_task(&trace)).await, trace)];
    f.c.wait_for(long[0].0, WAIT, "running", |d| {
        d.task.status == TaskStatus::Running && d.task.progress.is_some()
    })
    .await;

    // The pause is the scenario: a frozen leader, not a wait.
    let paused = Instant::now();
    f.c.master().pause();
    let (took, leader) = f.new_leader(before, paused).await;
    assert!(
        took <= TTL + Duration::from_secs(1) + IN_TRANSACTION_SLACK,
        "a standby led {took:?} after the leader froze (lease {TTL:?})\n{}",
        f.logs()
    );
    eprintln!("leader paused: a standby led {took:?} later");
    let id = f.submit(json!({"adapter": "noop", "params": {}})).await;
    f.completed(id).await;

    f.c.master().resume();
    let master = f.c.master.as_ref().unwrap();
    logged(master, "this master stepped down; standing by", WAIT).await;
    logged(master, "standing by: another master leads", WAIT).await;
    let seen = leadership(&f.apis[0])
        .await
        .expect("the old leader answers");
    assert_eq!(seen.role, "standby", "{seen:?}");
    assert_eq!(seen.leader_api.as_deref(), Some(leader.as_str()));
    // Awake, the old leader saw a task whose host had stopped answering it:
    // had its requeue or its fence gone through, the task would have run
    // twice.
    assert_ran_once(&f, &long).await;
    let id = f.submit(json!({"adapter": "noop", "params": {}})).await;
    f.completed(id).await;
}

/// Redis loses its data while tasks run on hosts that are frozen (so
/// Redis holds none of their leases); the leader sees the loss and dies.
/// The standby that takes over inside the window in which missing leases
/// prove nothing must wait it out as the dead leader would have: it gives
/// no live attempt up, and once the hosts wake every task completes on its
/// first attempt.
#[tokio::test]
async fn a_standby_that_takes_over_after_redis_lost_its_data_gives_up_no_live_attempt() {
    let _serial = serial();
    let mut f = Fleet::start(2, false).await;
    let before = f.term().await;
    let mut long = vec![];
    for i in 0..2 {
        let trace = format!("long-{i}.jsonl");
        long.push((f.submit(long_task(&trace)).await, trace));
    }
    for (id, _) in &long {
        f.c.wait_for(*id, WAIT, "running", |d| {
            d.task.status == TaskStatus::Running && d.task.progress.is_some()
        })
        .await;
    }
    for h in ["host-1", "host-2"] {
        f.c.host(h).pause();
    }
    let noticed = "Redis holds no epoch";
    let seen = f.c.log("master").matches(noticed).count();
    f.c.redis.restart_empty();
    let until = Instant::now() + WAIT;
    while f.c.log("master").matches(noticed).count() == seen {
        assert!(
            Instant::now() < until,
            "the leader never noticed that Redis lost its data\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = Instant::now();
    f.c.master().kill();
    let (_, leader) = f.new_leader(before, killed).await;
    // The new leader sweeps while Redis holds none of the live leases.
    let until = Instant::now() + WAIT;
    loop {
        let sweeps = common::health(&leader).await.and_then(|h| {
            let leads = h["leadership"]["role"] == "leader";
            h["scheduler"]["sweeps"].as_u64().filter(|_| leads)
        });
        if sweeps.is_some_and(|n| n >= 4) {
            break;
        }
        assert!(
            Instant::now() < until,
            "the new leader made no sweeps\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (id, _) in &long {
        let detail = f.c.client().task(*id).await.expect("the task");
        assert_eq!(
            (detail.task.status, detail.attempts.len()),
            (TaskStatus::Running, 1),
            "task {id} was given up while its host lived: {:?}\n{}",
            detail.attempts,
            f.logs()
        );
    }
    for h in ["host-1", "host-2"] {
        f.c.host(h).resume();
    }
    assert_ran_once(&f, &long).await;
}

/// A frozen leader may be inside a transaction: the server ends it only
/// after `idle_in_transaction_session_timeout` (here the leader lease,
/// [`TTL`]), and its term's share lock holds the successor back until then;
/// the rest is room for a loaded machine.
const IN_TRANSACTION_SLACK: Duration = Duration::from_secs(3);

/// A TCP relay to PostgreSQL that the test can turn into a black hole:
/// connections stay open and nothing more passes, as in a partition.
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl Relay {
    /// Runs on a thread and runtime of its own, so nothing the test does
    /// on its runtime delays what it relays.
    async fn start(target: String) -> Relay {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((client, _)) = listener.accept().await {
                    let flag = flag.clone();
                    let target = target.clone();
                    tokio::spawn(async move {
                        let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                            return;
                        };
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::join!(pump(cr, sw, flag.clone()), pump(sr, cw, flag));
                    });
                }
            })
        });
        Relay { port, cut }
    }
}

/// Copies bytes until the relay is cut; then holds the sockets open.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 || cut.load(Ordering::SeqCst) {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    // A black hole: keep both ends, send nothing.
    std::future::pending::<()>().await;
    drop((from, to));
}

#[tokio::test]
async fn a_leader_cut_off_from_the_database_steps_down_before_its_lease_ends() {
    let _serial = serial();
    let f = Fleet::start(1, true).await;
    let term = f.term().await;

    let cut = Instant::now();
    let relay = f.relay.as_ref().expect("relay");
    relay.cut.store(true, Ordering::SeqCst);
    let master = f.c.master.as_ref().unwrap();
    let mut stepped_down = None;
    let mut took_over = None;
    while stepped_down.is_none() || took_over.is_none() {
        if stepped_down.is_none() && master.log_text().contains("this master stepped down") {
            stepped_down = Some(cut.elapsed());
        }
        if took_over.is_none() {
            for api in &f.apis[1..] {
                let seen = leadership(api).await;
                if seen.is_some_and(|s| s.term.is_some_and(|t| t > term)) {
                    took_over = Some(cut.elapsed());
                }
            }
        }
        assert!(
            cut.elapsed() < WAIT,
            "stepped down: {stepped_down:?}, taken over: {took_over:?}\n{}",
            f.logs()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (stepped_down, took_over) = (stepped_down.unwrap(), took_over.unwrap());
    assert!(
        stepped_down < took_over,
        "the cut-off leader stepped down after {stepped_down:?}, a standby led after \
         {took_over:?}: for a while two masters led\n{}",
        f.logs()
    );
    assert!(stepped_down < TTL, "stepped down after {stepped_down:?}");
    eprintln!(
        "leader cut off: it stepped down after {stepped_down:?}, a standby led after {took_over:?}"
    );
    f.c.wait_for_hosts(1).await;
    let id = f.submit(json!({"adapter": "noop", "params": {}})).await;
    f.completed(id).await;
}
