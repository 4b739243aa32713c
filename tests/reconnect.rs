//! The original's testNoThunderingHerdOnMasterRestart: hosts that lost the
//! master together come back spread out by their jittered backoff — ten host
//! processes, and two hundred light hosts (each a real TCP connection with
//! the real lease layer and adapter runtime) in this test process.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainyard_host::config::{AdapterConfig, HostConfig};
use trainyard_host::link::connection::ConnectionEvent;
use trainyard_host::runtime::{AdapterRuntime, RuntimeConfig};
use trainyard_proto::HostId;

/// Seconds since midnight of a log line's RFC 3339 timestamp.
fn log_time(line: &str) -> Option<f64> {
    let t = line
        .split_whitespace()
        .next()?
        .split('T')
        .nth(1)?
        .trim_end_matches('Z');
    let mut parts = t.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

fn spread(times: &[f64]) -> f64 {
    let lo = times.iter().cloned().fold(f64::MAX, f64::min);
    let hi = times.iter().cloned().fold(f64::MIN, f64::max);
    hi - lo
}

#[tokio::test]
async fn ten_hosts_do_not_come_back_all_at_once_after_a_master_restart() {
    let _serial = serial();
    let mut setup = Setup::new("sqlite");
    // No task runs: one light adapter keeps ten hosts' start-up cheap.
    setup.adapters = vec![("noop", vec!["true"])];
    // With ±25 % jitter a 4 s first delay spreads attempts over 3..5 s.
    setup.timers.reconnect_initial = Duration::from_secs(4);
    setup.timers.reconnect_max = Duration::from_secs(8);
    setup.timers.lease_ttl = Duration::from_secs(10);
    setup.timers.idle_timeout = Duration::from_secs(5);
    let mut c = TestCluster::prepare(setup).await;
    c.start_master().await;
    for i in 1..=10 {
        c.start_host(&format!("host-{i}"));
    }
    c.wait_for_hosts(10).await;
    let before: Vec<usize> = (1..=10)
        .map(|i| c.log(&format!("host-{i}")).lines().count())
        .collect();

    c.master().kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.start_master().await;
    c.wait_for_hosts(10).await;

    let mut first_attempts = vec![];
    for (i, skip) in (1..=10).zip(before) {
        let log = c.log(&format!("host-{i}"));
        let first = log
            .lines()
            .skip(skip)
            .filter(|l| l.contains("connecting to the master"))
            .find_map(log_time)
            .unwrap_or_else(|| panic!("host-{i} logged no reconnect attempt"));
        first_attempts.push(first);
    }
    let spread = spread(&first_attempts);
    assert!(
        spread > 0.5,
        "first reconnect attempts spread over only {:.0} ms: {first_attempts:?}",
        spread * 1000.0
    );
}

#[tokio::test]
async fn two_hundred_hosts_all_reregister_spread_out_after_a_master_restart() {
    let _serial = serial();
    const HOSTS: usize = 200;
    let mut setup = Setup::new("sqlite");
    setup.timers.reconnect_initial = Duration::from_secs(2);
    setup.timers.reconnect_max = Duration::from_secs(4);
    setup.timers.heartbeat_interval = Duration::from_millis(500);
    setup.timers.lease_ttl = Duration::from_secs(10);
    setup.timers.idle_timeout = Duration::from_secs(5);
    let mut c = TestCluster::prepare(setup).await;
    c.start_master().await;

    let secret = trainyard::secrets::cluster_secret(&c.cluster.settings.cluster, false).unwrap();
    let runtime = AdapterRuntime::new(RuntimeConfig {
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let attempts: Arc<Mutex<Vec<Vec<Instant>>>> = Arc::new(Mutex::new(vec![vec![]; HOSTS]));
    let mut hosts = vec![];
    for i in 0..HOSTS {
        let mut config = HostConfig::new(
            HostId::new(format!("light-{i}")).unwrap(),
            c.cluster.settings.host.master.clone(),
            c.redis.url(),
            secret.clone(),
            c.cluster.dir.join("light").join(i.to_string()),
        );
        config.timers = c.cluster.settings.timers.clone();
        config.slots = 1;
        config.supervisor = common::binaries().supervisor;
        config.adapters = vec![AdapterConfig {
            path: common::adapter("noop"),
            programs: vec!["true".into()],
            containment: Default::default(),
            python: None,
            progress_timeout: None,
        }];
        let log = attempts.clone();
        let observer: trainyard_host::link::connection::AttemptObserver = Arc::new(move |e| {
            if let ConnectionEvent::Connecting { at } = e {
                log.lock().unwrap()[i].push(at);
            }
        });
        hosts.push(
            trainyard_host::start(config, runtime.clone(), Some(observer))
                .await
                .unwrap(),
        );
    }
    c.wait_for_hosts(HOSTS).await;

    let killed = Instant::now();
    c.master().kill();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    c.start_master().await;
    c.wait_for_hosts(HOSTS).await;

    let firsts: Vec<f64> = attempts
        .lock()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let first = a
                .iter()
                .find(|t| **t > killed)
                .unwrap_or_else(|| panic!("light-{i} never tried to reconnect"));
            first.duration_since(killed).as_secs_f64()
        })
        .collect();
    let spread = spread(&firsts);
    assert!(
        spread > 0.5,
        "first reconnect attempts of {HOSTS} hosts spread over only {:.0} ms",
        spread * 1000.0
    );
    // Every one of them is registered again: none dropped.
    let connected = c.client().hosts().await.unwrap();
    let light = connected
        .iter()
        .filter(|h| h.connected && h.id.starts_with("light-"))
        .count();
    assert_eq!(light, HOSTS);
    futures::future::join_all(
        hosts
            .into_iter()
            .map(|h| h.shutdown(Duration::from_secs(1))),
    )
    .await;
}
