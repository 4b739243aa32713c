//! The dashboard's first paint: a master holding 10,000 finished tasks,
//! each with a curve of 20 points, and a first visit to each main view in
//! a fresh headless Chromium (nothing cached). The figure is the time from
//! the start of navigation to the view showing its data (the page's own
//! `view-ready:<path>` performance mark), next to the browser's first
//! contentful paint. Target: under 1 s.

use super::api::wait_terminal;
use super::env::BenchEnv;
use super::fleet::{Fleet, FleetSpec};
use super::report::{median_p99, Row};
use serde_json::json;
use std::time::Duration;
use trainyard::client::ApiClient;
use trainyard_testkit::browser::{wait_js, Driver};

/// How long a view may take to show its data before the run gives up.
const PATIENCE: Duration = Duration::from_secs(60);
/// Tasks per submission while filling the master.
const SUBMIT_BATCH: usize = 500;
/// Points on each task's curve.
const CURVE_POINTS: u32 = 20;
/// What a first visit may take until the view shows its data.
const FIRST_PAINT_BUDGET_MS: f64 = 1_000.0;

pub async fn run(env: &BenchEnv) -> anyhow::Result<Vec<Row>> {
    let tasks = env.size(10_000, 60);
    let loads = env.size(5, 1);
    let mut stage = env.stage("dashboard", "sqlite").await?;
    // Each visit is a fresh browser: reads open, so what is measured is the
    // views, not signing in (docs/teams.md).
    stage.cluster.settings.api.open_reads = true;
    stage.cluster.write_config()?;
    let mut master = stage.cluster.spawn_master()?;
    let client = stage.cluster.wait_for_master(PATIENCE).await?;
    let (hosts, slots) = env.size((16, 32), (2, 4));
    let fleet = Fleet::start(
        &stage.cluster,
        &FleetSpec {
            count: hosts,
            slots,
            adapters: vec![(env.adapter("noop"), vec!["seq".into()])],
            certificates: None,
        },
    )
    .await?;
    stage
        .cluster
        .wait_for_hosts(&client, hosts, PATIENCE)
        .await?;
    let last = fill(&client, tasks).await?;
    fleet.shutdown().await;

    let driver = Driver::start().await.map_err(anyhow::Error::msg)?;
    let base = client.base_url().trim_end_matches('/').to_string();
    let mut rows = vec![Row::info(
        "dashboard",
        "setup (sqlite)",
        format!("{tasks} completed tasks of {CURVE_POINTS} points each; {loads} first visits per view, each in a fresh browser"),
    )];
    let views = [
        ("overview", "/".to_string()),
        ("task list", "/tasks".to_string()),
        ("task page", format!("/task/{last}")),
    ];
    for (view, path) in views {
        let (ready, painted) = visits(&driver, &base, &path, loads).await?;
        let (ready_p50, ready_worst) = (ready[ready.len() / 2], ready[ready.len() - 1]);
        let (paint_p50, _) = median_p99(&mut painted.clone()).unwrap_or_default();
        rows.push(Row::checked(
            "dashboard",
            format!("{view}: first visit until its data shows, {tasks} tasks"),
            format!("median {ready_p50:.0} ms, worst {ready_worst:.0} ms (first contentful paint {paint_p50:.0} ms)"),
            "< 1 s",
            ready_worst < FIRST_PAINT_BUDGET_MS,
        ));
    }
    master.stop(Duration::from_secs(10));
    Ok(rows)
}

/// Submits `n` tasks printing a curve each and waits until all ended;
/// returns the newest task's id.
async fn fill(client: &ApiClient, n: usize) -> anyhow::Result<u64> {
    let mut last = 0;
    for start in (0..n).step_by(SUBMIT_BATCH) {
        let batch: Vec<serde_json::Value> = (start..(start + SUBMIT_BATCH).min(n))
            .map(|i| {
                json!({
                    "adapter": "noop",
                    "name": format!("curve-{}", i % 100),
                    "params": { "lines": CURVE_POINTS },
                })
            })
            .collect();
        let ids = client.submit_batch(&batch).await?;
        last = last.max(ids.into_iter().max().unwrap_or(0));
    }
    wait_terminal(client, n, Duration::from_secs(600)).await?;
    Ok(last)
}

/// `loads` first visits to the view at `path` (a dashboard route); the
/// times until it showed its data and until first contentful paint, in ms
/// since navigation started, sorted.
async fn visits(
    driver: &Driver,
    base: &str,
    path: &str,
    loads: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut ready, mut painted) = (vec![], vec![]);
    for _ in 0..loads {
        let b = driver.session().await.map_err(anyhow::Error::msg)?;
        b.goto(&format!("{base}/#{path}")).await?;
        let mark = format!("performance.getEntriesByName('view-ready:{path}')[0]?.startTime");
        let shown = wait_js(
            &b,
            &mark,
            &format!("the view {path} shows its data"),
            PATIENCE,
        )
        .await
        .map_err(anyhow::Error::msg)?;
        let paint = b
            .execute(
                "return performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? 0;",
                vec![],
            )
            .await?;
        b.close().await?;
        ready.push(shown.as_f64().unwrap_or(f64::NAN));
        painted.push(paint.as_f64().unwrap_or(0.0));
    }
    ready.sort_by(|a, b| a.total_cmp(b));
    Ok((ready, painted))
}
