//! One of each, through real processes: one master per SQLite database (a
//! second refuses to start, whatever its key prefix, and a master killed
//! with SIGKILL does not block its successor; on PostgreSQL it stands by), one connection per host id (a
//! twin is refused while the host lives; a host that restarted while its
//! old connection looked alive gets back in), and a host that could run
//! out of adapter instances refuses to start.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{exited, logged, serial, Setup, TestCluster};
use serde_json::json;
use std::time::Duration;
use trainyard::settings::Settings;
use trainyard_master::model::TaskStatus;

const WAIT: Duration = Duration::from_secs(60);

/// Settings for a second master on the same database: other ports (so only
/// the database can stop it) and, to show prefixes do not separate masters,
/// another Redis key prefix.
fn second_master(s: &mut Settings) {
    let hosts = trainyard_testkit::free_port();
    let api = trainyard_testkit::free_port();
    s.master.hosts_listen = format!("127.0.0.1:{hosts}").parse().unwrap();
    s.master.api_listen = format!("127.0.0.1:{api}").parse().unwrap();
    s.redis_key_prefix = "other-cluster:".into();
}

async fn a_second_master_on_one_database_refuses_to_start(backend: &'static str) {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new(backend), 1).await;
    let config = c.config_variant("second-master.toml", second_master);
    let mut second = c.spawn_with_config("second-master", &config, &["master"]);
    let log = exited(&mut second, WAIT).await;
    assert!(
        log.contains("another master is running on"),
        "the second master says why it stopped:\n{log}"
    );
    // The first keeps working.
    let id = c.submit(json!({"adapter": "noop", "params": {}})).await;
    c.wait_for_status(id, TaskStatus::Completed, WAIT).await;

    // Killed without any chance to clean up, it does not block a successor.
    c.restart_master().await;
    c.wait_for_hosts(1).await;
    let id = c.submit(json!({"adapter": "noop", "params": {}})).await;
    c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    // And the successor holds the lock in turn.
    let mut third = c.spawn_with_config("third-master", &config, &["master"]);
    let log = exited(&mut third, WAIT).await;
    assert!(log.contains("another master is running on"), "{log}");
}

#[tokio::test]
async fn a_second_master_on_one_database_refuses_to_start_on_sqlite() {
    a_second_master_on_one_database_refuses_to_start("sqlite").await;
}

/// On PostgreSQL a second master stands by instead (tests/ha.rs has the
/// failovers), whatever its key prefix, and leads once the first is gone.
#[tokio::test]
async fn a_second_master_on_one_database_stands_by_on_postgres() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("postgres"), 1).await;
    let config = c.config_variant("second-master.toml", second_master);
    let second = c.spawn_with_config("second-master", &config, &["master"]);
    logged(&second, "standing by: another master leads", WAIT).await;
    let id = c.submit(json!({"adapter": "noop", "params": {}})).await;
    c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    assert!(
        !second.log_text().contains("this master leads"),
        "{}",
        second.log_text()
    );

    c.master().kill();
    logged(&second, "this master leads", WAIT).await;
}

#[tokio::test]
async fn a_second_connection_claiming_a_live_hosts_id_is_refused() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let before = c.client().hosts().await.unwrap();
    let holder = before[0].addr.clone();

    c.start_host_with("twin", "host-1", |_| {});
    let twin = c.hosts.last().unwrap();
    logged(twin, "refused this host", WAIT).await;
    let master = c.master.as_ref().unwrap();
    logged(
        master,
        "refused a second connection claiming the id of a live host",
        WAIT,
    )
    .await;
    // The host keeps its connection and its work.
    let hosts = c.client().hosts().await.unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!(
        hosts[0].addr, holder,
        "the twin did not take the host's place"
    );
    let id = c.submit(json!({"adapter": "noop", "params": {}})).await;
    c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    assert!(
        !c.hosts[1].log_text().contains("connected to the master"),
        "the twin never got in"
    );
}

#[tokio::test]
async fn a_host_that_restarts_while_its_old_connection_looks_alive_gets_back_in() {
    let _serial = serial();
    let mut c = TestCluster::start(Setup::new("sqlite"), 1).await;
    let old_addr = c.client().hosts().await.unwrap()[0].addr.clone();
    // The old process freezes: its connection stays open but answers
    // nothing, like a host whose machine died under a half-open socket.
    c.host("host-1").pause();
    c.start_host_with("host-1-restarted", "host-1", |_| {});
    let hosts = c
        .wait_for_hosts_where("host-1 back on a new connection", |h| {
            h.iter()
                .any(|h| h.id == "host-1" && h.connected && h.addr != old_addr)
        })
        .await;
    assert_eq!(hosts.len(), 1);
    let id = c.submit(json!({"adapter": "noop", "params": {}})).await;
    c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    // The frozen one, thawed, is now the twin and stays out.
    c.host("host-1").resume();
    logged(c.host("host-1"), "refused this host", WAIT).await;
    let hosts = c.client().hosts().await.unwrap();
    assert!(hosts[0].connected && hosts[0].addr != old_addr, "{hosts:?}");
}

#[tokio::test]
async fn a_host_with_more_slots_than_adapter_instances_refuses_to_start() {
    let _serial = serial();
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    c.start_master().await;
    c.start_host_with("host-1", "host-1", |s| {
        s.host.slots = 3;
        s.host.adapter_instances = 2;
    });
    let log = exited(&mut c.hosts[0], WAIT).await;
    assert!(
        log.contains("host.slots = 3 is more than host.adapter_instances = 2"),
        "{log}"
    );
}
