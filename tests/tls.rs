//! TLS through real processes: a cluster over TLS and one over mutual TLS
//! complete tasks (the CLI over HTTPS); hosts whose certificate comes from
//! another CA, has expired, or names another host are refused, and both
//! sides say why in their logs; a plain-TCP client of the TLS listener gets
//! nothing while the master keeps serving; and a handshake relayed between
//! two TLS sessions by a machine in the middle holding a valid certificate
//! fails, because the proofs are bound to the session.
//!
//! Certificates come from `trainyard certs`; the odd ones (another CA,
//! expired, another name) are made here with the same code.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{logged, serial, Setup, TestCluster};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use trainyard::certs::{DevCa, Purpose, Validity};
use trainyard::settings::Settings;
use trainyard_master::model::TaskStatus;

const WAIT: Duration = Duration::from_secs(60);

/// A cluster whose master serves TLS on both listeners with certificates
/// from `trainyard certs` in `<dir>/tls` (host certificates for `hosts`),
/// and whose hosts and CLI check it against the CA. Nothing started yet.
async fn tls_cluster(mutual: bool, hosts: &[&str]) -> TestCluster {
    let mut c = TestCluster::prepare(Setup::new("sqlite")).await;
    let dir = c.cluster.dir.join("tls");
    let mut args = vec!["certs", "--out", dir.to_str().unwrap()];
    for h in hosts {
        args.extend(["--host", h]);
    }
    let written = c.cli(&args);
    assert!(written.contains("master-key.pem"), "{written}");
    let s = &mut c.cluster.settings;
    s.tls.enabled = true;
    s.tls.ca = Some(dir.join("ca.pem"));
    s.tls.cert = Some(dir.join("master.pem"));
    s.tls.key = Some(dir.join("master-key.pem"));
    s.tls.require_host_certificates = mutual;
    s.api.url = s.api.url.replace("http://", "https://");
    c.cluster.write_config().unwrap();
    c
}

/// The settings of a host presenting `cert` and `key`.
fn presenting(cert: PathBuf, key: PathBuf) -> impl FnOnce(&mut Settings) {
    move |s: &mut Settings| {
        s.tls.cert = Some(cert);
        s.tls.key = Some(key);
    }
}

fn host_identity(c: &TestCluster, id: &str) -> (PathBuf, PathBuf) {
    let dir = c.cluster.dir.join("tls");
    (
        dir.join(format!("host-{id}.pem")),
        dir.join(format!("host-{id}-key.pem")),
    )
}

/// Writes a certificate and key made by `ca` for `name` into `dir`.
fn odd_certificate(
    dir: &Path,
    stem: &str,
    ca: &DevCa,
    name: &str,
    validity: Validity,
) -> (PathBuf, PathBuf) {
    let issued = ca
        .issue(&[name.to_string()], Purpose::Client, validity)
        .unwrap();
    let (cert, key) = (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}-key.pem")),
    );
    std::fs::write(&cert, issued.cert_pem).unwrap();
    std::fs::write(&key, issued.key_pem).unwrap();
    (cert, key)
}

async fn completes_noop_tasks(c: &TestCluster, n: usize) {
    let mut ids = vec![];
    for _ in 0..n {
        ids.push(c.submit(json!({"adapter": "noop", "params": {}})).await);
    }
    for id in ids {
        c.wait_for_status(id, TaskStatus::Completed, WAIT).await;
    }
}

#[tokio::test]
async fn a_cluster_over_tls_completes_tasks_and_the_cli_speaks_https() {
    let _serial = serial();
    let mut c = tls_cluster(false, &[]).await;
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;
    completes_noop_tasks(&c, 3).await;
    let listed = c.cli(&["tasks", "--status", "COMPLETED"]);
    assert!(listed.contains("COMPLETED"), "{listed}");
    logged(c.master(), "transport=\"TLS\"", WAIT).await;
}

#[tokio::test]
async fn a_cluster_over_mutual_tls_completes_tasks() {
    let _serial = serial();
    let mut c = tls_cluster(true, &["host-1", "host-2"]).await;
    c.start_master().await;
    for id in ["host-1", "host-2"] {
        let (cert, key) = host_identity(&c, id);
        c.start_host_with(id, id, presenting(cert, key));
    }
    c.wait_for_hosts(2).await;
    completes_noop_tasks(&c, 4).await;
    logged(
        c.master(),
        "hosts present certificates naming their id",
        WAIT,
    )
    .await;
}

#[tokio::test]
async fn hosts_with_another_cas_an_expired_or_another_hosts_certificate_are_refused() {
    let _serial = serial();
    let mut c = tls_cluster(true, &["host-1", "host-2"]).await;
    c.start_master().await;
    let (cert, key) = host_identity(&c, "host-1");
    c.start_host_with("host-1", "host-1", presenting(cert, key));
    c.wait_for_hosts(1).await;

    let dir = c.cluster.dir.join("tls");
    let other_ca = DevCa::generate("another CA").unwrap();
    let (cert, key) = odd_certificate(&dir, "other-ca", &other_ca, "stranger", Validity::days(30));
    let stranger = c.start_host_with("stranger", "stranger", presenting(cert, key));
    let ours = DevCa::load(
        &std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
        &std::fs::read_to_string(dir.join("ca-key.pem")).unwrap(),
    )
    .unwrap();
    let lapsed = Validity {
        not_before: time::OffsetDateTime::now_utc() - time::Duration::days(30),
        not_after: time::OffsetDateTime::now_utc() - time::Duration::days(1),
    };
    let (cert, key) = odd_certificate(&dir, "expired", &ours, "expired", lapsed);
    let expired = c.start_host_with("expired", "expired", presenting(cert, key));
    // host-2's valid certificate, presented by a host claiming to be host-3.
    let (cert, key) = host_identity(&c, "host-2");
    let impostor = c.start_host_with("impostor", "host-3", presenting(cert, key));

    for (i, reason) in [
        (stranger, "UnknownIssuer"),
        (expired, "certificate expired"),
    ] {
        let log = logged(
            &c.hosts[i],
            "could not connect to the master over TLS",
            WAIT,
        )
        .await;
        assert!(log.contains("TLS"), "{log}");
        let master = logged(c.master(), reason, WAIT).await;
        assert!(
            master.contains("TLS handshake with a host failed"),
            "{master}"
        );
    }
    logged(&c.hosts[impostor], "does not name its host id host-3", WAIT).await;
    logged(
        c.master(),
        "the host's TLS certificate does not name its host id host-3",
        WAIT,
    )
    .await;

    // None of them got in, and the cluster keeps working.
    let hosts = c.client().hosts().await.unwrap();
    let ids: Vec<_> = hosts.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["host-1"], "{hosts:?}");
    completes_noop_tasks(&c, 2).await;
}

#[tokio::test]
async fn a_plain_tcp_client_of_the_tls_listeners_gets_nothing_and_the_master_keeps_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _serial = serial();
    let mut c = tls_cluster(false, &[]).await;
    c.start_master().await;
    c.start_host("host-1");
    c.wait_for_hosts(1).await;

    // A plain-TCP host: it hears no challenge, and is never connected.
    let plain = c.start_host_with("plain", "plain", |s| s.tls.enabled = false);
    // It sends nothing until challenged, so its TLS handshake times out.
    logged(c.master(), "TLS handshake with a host timed out", WAIT).await;
    // A raw client that sends something that is not TLS, then reads.
    let hosts_addr = c.cluster.settings.master.hosts_listen;
    let mut raw = tokio::net::TcpStream::connect(hosts_addr).await.unwrap();
    raw.write_all(b"\x00\x00\x00\x10hello, master!!!")
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(WAIT, raw.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the master closed the connection");
    assert!(
        got.is_empty() || got[0] == 0x15,
        "a plain client gets no frame, at most a TLS alert: {got:?}"
    );
    logged(c.master(), "TLS handshake with a host failed", WAIT).await;
    // Plain HTTP against the HTTPS API gets no answer either.
    let api = c.cluster.settings.master.api_listen;
    let http = reqwest::Client::new()
        .get(format!("http://{api}/v1/health/live"))
        .timeout(Duration::from_secs(20))
        .send()
        .await;
    assert!(http.is_err(), "plain HTTP got an answer: {http:?}");

    completes_noop_tasks(&c, 2).await;
    let hosts = c.client().hosts().await.unwrap();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    assert!(!c.hosts[plain]
        .log_text()
        .contains("connected to the master"));
}

#[tokio::test]
async fn a_handshake_relayed_between_two_tls_sessions_fails() {
    let _serial = serial();
    let mut c = tls_cluster(false, &[]).await;
    c.start_master().await;
    let dir = c.cluster.dir.join("tls");
    // The machine in the middle holds a certificate the host trusts (here:
    // the master's own) and relays bytes between its two sessions.
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let acceptor = trainyard_proto::tls::ServerTls {
        cert: dir.join("master.pem"),
        key: dir.join("master-key.pem"),
        client_ca: None,
    }
    .acceptor()
    .unwrap();
    let connector = trainyard_proto::tls::ClientTls {
        server: trainyard_proto::tls::ServerCheck::Ca(dir.join("ca.pem")),
        identity: None,
    }
    .connector()
    .unwrap();
    let master = c.cluster.settings.master.hosts_listen;
    let relaying = tokio::spawn(async move {
        loop {
            let (from_host, _) = relay.accept().await.unwrap();
            let (acceptor, connector) = (acceptor.clone(), connector.clone());
            tokio::spawn(async move {
                let mut host_side = acceptor.accept(from_host).await?;
                let to_master = tokio::net::TcpStream::connect(master).await?;
                let name = trainyard_proto::tls::server_name_of("127.0.0.1").unwrap();
                let mut master_side = connector.connect(name, to_master).await?;
                tokio::io::copy_bidirectional(&mut host_side, &mut master_side).await?;
                Ok::<_, std::io::Error>(())
            });
        }
    });
    let relayed = c.start_host_with("relayed", "host-1", move |s| {
        s.host.master = relay_addr.to_string();
    });
    logged(c.master(), "proof was made for another TLS session", WAIT).await;
    logged(&c.hosts[relayed], "the master refused this host", WAIT).await;
    assert!(c.client().hosts().await.unwrap().is_empty());
    relaying.abort();
}
