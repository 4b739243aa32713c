//! The `tls` benchmark: dispatch throughput on SQLite over plain TCP, TLS
//! and mutual TLS, each on a fresh master, Redis and database, and their
//! ratios to plain TCP.

use super::{one_backend, rate_or_cpu, Load, Work, FLEET};
use crate::env::BenchEnv;
use crate::report::Row;

/// What hosts and the API client reach the master over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transport {
    Plain,
    Tls,
    /// TLS, and every host presents a certificate naming its id.
    MutualTls,
}

impl Transport {
    /// How the rows of a run over it are labelled, after the backend.
    pub(super) fn label(self) -> &'static str {
        match self {
            Transport::Plain => "",
            Transport::Tls => ", TLS",
            Transport::MutualTls => ", mTLS",
        }
    }
}

/// Dispatch throughput on SQLite over plain TCP, TLS and mutual TLS, each
/// on a fresh master, Redis and database.
pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let mut rows = vec![];
    let mut rates = vec![];
    for transport in [Transport::Plain, Transport::Tls, Transport::MutualTls] {
        let bench = match transport {
            Transport::Plain => "tls-off",
            Transport::Tls => "tls",
            Transport::MutualTls => "mtls",
        };
        let load = Load {
            transport,
            ..Load::plain(bench, Work::Nothing, FLEET)
        };
        let (run, rate) = one_backend(env, "sqlite", load).await?;
        // Setup once; then what each transport changes: throughput and the
        // CPU it costs per task.
        rows.extend(
            run.into_iter()
                .filter(|r| (rates.is_empty() && r.measure.starts_with("setup")) || rate_or_cpu(r)),
        );
        rates.push(rate);
    }
    for row in &mut rows {
        row.bench = "tls".into();
        row.target.clear();
        row.verdict = crate::report::Verdict::Info;
    }
    let (plain, tls, mtls) = (rates[0], rates[1], rates[2]);
    let ratio = |on: f64| {
        format!(
            "{:.2} ({:+.0} %)",
            on / plain.max(1.0),
            (on / plain.max(1.0) - 1.0) * 100.0
        )
    };
    rows.push(Row::info(
        "tls",
        "dispatch throughput, TLS off / TLS / mTLS (sqlite)",
        format!("{plain:.0} / {tls:.0} / {mtls:.0} tasks/s"),
    ));
    rows.push(Row::info("tls", "ratio TLS / off", ratio(tls)));
    rows.push(Row::info("tls", "ratio mTLS / off", ratio(mtls)));
    Ok(rows)
}

/// Turns the stage's cluster to TLS: a development CA and a master
/// certificate from `trainyard certs`, HTTPS for the API client; for mutual
/// TLS, a certificate per light host too, which the master requires.
/// Returns the directory of the hosts' certificates under mutual TLS.
pub(super) fn use_tls(
    cluster: &mut trainyard::cluster::Cluster,
    mutual: bool,
    hosts: usize,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    let dir = cluster.dir.join("tls");
    let ids: Vec<String> = if mutual {
        (0..hosts).map(crate::fleet::host_id).collect()
    } else {
        vec![]
    };
    trainyard::certs::write(&trainyard::certs::Request {
        dir: &dir,
        master_names: &["127.0.0.1".to_string()],
        hosts: &ids,
        days: 1,
        reissue: false,
    })?;
    let s = &mut cluster.settings;
    s.tls.enabled = true;
    s.tls.ca = Some(dir.join("ca.pem"));
    s.tls.cert = Some(dir.join("master.pem"));
    s.tls.key = Some(dir.join("master-key.pem"));
    s.tls.require_host_certificates = mutual;
    s.api.url = s.api.url.replace("http://", "https://");
    Ok(mutual.then_some(dir))
}
