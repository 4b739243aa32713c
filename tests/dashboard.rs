//! The web dashboard in a real browser: headless Chromium, driven through
//! WebDriver (chromedriver) by fantoccini, against a real master, host,
//! Redis and database. The task list shows the submitted tasks, a running
//! task's curve gains points from the event stream without a reload, its
//! log tail shows the trainer's lines, and the cancel button, given the
//! API token, cancels the task (checked
//! through the API). Screenshots of every view are saved under
//! `target/dashboard-screenshots/` for a person to look at.
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (`make test`
//! installs them when it runs as root); without them the test fails saying
//! so.

// `serial()` holds a std mutex across each whole test on purpose: the
// multi-process tests take the machine's ports and CPU one at a time.
#![allow(clippy::await_holding_lock)]

use crate::common;

use common::{serial, Setup, TestCluster};
use fantoccini::{Client, Locator};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trainyard_master::model::TaskStatus;
use trainyard_testkit::browser::{self, Driver};

/// How long anything the page should show may take to appear.
const PATIENCE: Duration = Duration::from_secs(60);

async fn start_driver() -> Driver {
    Driver::start().await.unwrap_or_else(|e| panic!("{e}"))
}

async fn browser(driver: &Driver) -> Client {
    driver.session().await.unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `script` (a JavaScript expression) until it gives something other
/// than null, false or 0.
async fn wait_js(c: &Client, script: &str, what: &str) -> Value {
    browser::wait_js(c, script, what, PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(screenshots().join(format!("{name}.png")), png).expect("save screenshot");
}

/// The number in a chart's `data-points`.
fn points(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn the_dashboard_lists_tasks_draws_live_curves_and_cancels_with_the_token() {
    let _serial = serial();
    let driver = start_driver().await;
    let c = TestCluster::start(
        Setup {
            slots: 4,
            ..Setup::new("sqlite")
        },
        1,
    )
    .await;
    let base = c.cluster.settings.api.url.clone();
    let token = std::fs::read_to_string(&c.cluster.settings.api.token_file)
        .expect("the API token")
        .trim()
        .to_string();
    let quick: Vec<u64> = futures::future::join_all((0..2).map(|seed| {
        c.submit(json!({
            "adapter": "python-trainer",
            "name": "dashboard-quick",
            "params": {"episodes": 80, "seed": seed, "step_delay_ms": 2},
        }))
    }))
    .await;
    // Long enough to watch and to cancel: 20,000 episodes of 20 ms.
    let long = c
        .submit(json!({
            "adapter": "python-trainer",
            "name": "dashboard-long",
            "params": {"episodes": 20000, "seed": 3, "step_delay_ms": 20},
        }))
        .await;
    let sweep_id = c
        .client()
        .create_sweep(&json!({
            "adapter": "python-trainer",
            "name": "dashboard-sweep",
            "grid": {"learning_rate": [0.05, 0.5]},
            "seeds": 2,
            "params": {"episodes": 60, "step_delay_ms": 2},
            "metric": "mean_return",
            "direction": "max",
        }))
        .await
        .expect("a sweep")
        .id;

    let b = browser(&driver).await;

    // Reads need a token: the page asks for one, refuses a wrong one, and
    // keeps the right one (as its session cookie) for every view after.
    b.goto(&format!("{base}/#/tasks")).await.expect("open");
    wait_js(
        &b,
        "document.querySelector('#signin-token')",
        "the sign-in form",
    )
    .await;
    let field = b.find(Locator::Css("#signin-token")).await.unwrap();
    field.send_keys("tyt_not-a-token").await.unwrap();
    b.find(Locator::Css("#signin-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &b,
        "document.querySelector('#signin-message')?.textContent.includes('refused')",
        "the page says the token was refused",
    )
    .await;
    field.clear().await.unwrap();
    field.send_keys(&token).await.unwrap();
    b.find(Locator::Css("#signin-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &b,
        "!document.querySelector('#signin') && document.querySelector('#who')?.textContent.includes('admin')",
        "the page signed in",
    )
    .await;

    // The task list shows what was submitted, with its names.
    b.goto(&format!("{base}/#/tasks")).await.expect("open");
    for id in quick.iter().chain([&long]) {
        wait_js(
            &b,
            &format!("document.querySelector('#task-table tr[data-task=\"{id}\"]')"),
            &format!("task {id} in the list"),
        )
        .await;
    }
    // Read in one script: the list is rebuilt as events arrive, so an
    // element found in one call may be gone by the next.
    wait_js(
        &b,
        "['dashboard-quick', 'dashboard-long'].every((name) => \
         document.querySelector('#task-table')?.textContent.includes(name))",
        "the task names in the list",
    )
    .await;
    screenshot(&b, "tasks").await;

    // The running task's curve gains points from the event stream, with
    // no reload of the page (the marker set on the window stays).
    b.goto(&format!("{base}/#/task/{long}")).await.unwrap();
    b.execute("window.__sameDocument = true; return null;", vec![])
        .await
        .unwrap();
    let first = points(
        &wait_js(
            &b,
            "document.querySelector('#chart-return')?.getAttribute('data-points') > 0 \
             && document.querySelector('#chart-return').getAttribute('data-points')",
            "the episode-return curve has points",
        )
        .await,
    );
    let later = points(
        &wait_js(
            &b,
            &format!(
                "document.querySelector('#chart-return').getAttribute('data-points') > {} \
                 && document.querySelector('#chart-return').getAttribute('data-points')",
                first + 20
            ),
            "the curve gains points while the trainer runs",
        )
        .await,
    );
    assert!(later > first + 20);
    assert_eq!(
        b.execute("return window.__sameDocument === true;", vec![])
            .await
            .unwrap(),
        json!(true),
        "the page was not reloaded"
    );
    // Every metric the trainer reports gets its own curve.
    wait_js(
        &b,
        "document.querySelector('#chart-metric-epsilon')?.getAttribute('data-points') > 0",
        "the epsilon curve",
    )
    .await;
    // The log tail shows the trainer's own lines as it prints them.
    wait_js(
        &b,
        "document.querySelector('#log-tail')?.getAttribute('data-lines') > 0 \
         && document.querySelector('#log-tail').textContent.includes('\"episode\"')",
        "the trainer's lines in the log tail",
    )
    .await;
    screenshot(&b, "task-running").await;

    // Cancel from the page: a wrong token is refused and changes nothing;
    // the right one cancels the task.
    b.find(Locator::Css("#cancel-task"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let field = b.find(Locator::Css("#cancel-token")).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys("not-the-token").await.unwrap();
    b.find(Locator::Css("#cancel-confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(
        &b,
        "document.querySelector('#cancel-message')?.textContent.includes('refused')",
        "the page says the token was refused",
    )
    .await;
    assert!(!c.task(long).await.task.status.is_terminal());
    field.clear().await.unwrap();
    field.send_keys(&token).await.unwrap();
    b.find(Locator::Css("#cancel-confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait_for_status(long, TaskStatus::Cancelled, PATIENCE)
        .await;
    wait_js(
        &b,
        "document.querySelector('#task-status')?.getAttribute('data-status') === 'CANCELLED'",
        "the page shows the task cancelled",
    )
    .await;
    screenshot(&b, "task-cancelled").await;

    // A finished task: attempts, final metrics, checkpoint.
    for id in &quick {
        c.wait_for_status(*id, TaskStatus::Completed, PATIENCE)
            .await;
    }
    b.goto(&format!("{base}/#/task/{}", quick[0]))
        .await
        .unwrap();
    wait_js(
        &b,
        "document.querySelector('#final-metrics')?.textContent.includes('mean_return')",
        "the final metrics",
    )
    .await;
    wait_js(
        &b,
        "/^\\d+\\.\\d+\\.\\d+/.test(document.querySelector('#attempts tbody td:nth-child(4)')?.textContent ?? '')",
        "the version of the adapter the attempt ran",
    )
    .await;
    // The whole page, for a person to look at.
    b.set_window_size(1400, 2400).await.unwrap();
    screenshot(&b, "task-completed").await;
    b.set_window_size(1400, 1100).await.unwrap();

    // The other views render what the API holds.
    b.goto(&format!("{base}/#/compare?name=dashboard-quick"))
        .await
        .unwrap();
    wait_js(
        &b,
        "document.querySelector('#compare-curves')?.getAttribute('data-tasks') === '2'",
        "both tasks of the name overlaid",
    )
    .await;
    screenshot(&b, "compare").await;

    let until = Instant::now() + PATIENCE * 3;
    while c.client().sweep(sweep_id).await.unwrap().ranking.unfinished > 0 {
        assert!(Instant::now() < until, "the sweep did not finish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.goto(&format!("{base}/#/sweep/{sweep_id}")).await.unwrap();
    wait_js(
        &b,
        "document.querySelector('#sweep-curves')?.getAttribute('data-configs') === '2' \
         && document.querySelectorAll('#ranking tbody tr').length === 2",
        "the ranking and a curve per configuration",
    )
    .await;
    screenshot(&b, "sweep").await;

    b.goto(&format!("{base}/#/host/host-1")).await.unwrap();
    wait_js(
        &b,
        "document.querySelector('#host-slots')?.textContent.includes('of 4')",
        "the host's slots",
    )
    .await;
    screenshot(&b, "host").await;

    b.goto(&format!("{base}/#/")).await.unwrap();
    wait_js(
        &b,
        "document.querySelector('[data-status=COMPLETED]')?.textContent >= 2 \
         && document.querySelector('#chart-activity canvas')",
        "the overview's counts and activity chart",
    )
    .await;
    screenshot(&b, "overview").await;
    b.close().await.expect("close the browser");
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::get(url).await.expect("request")
}

#[tokio::test]
async fn the_dashboard_is_served_offline_and_its_endpoints_refuse_bad_queries() {
    let _serial = serial();
    // About the files and the queries, not who reads them: open reads.
    let mut setup = Setup::new("sqlite");
    setup.configure = |s| s.api.open_reads = true;
    let c = TestCluster::start(setup, 1).await;
    let base = c.cluster.settings.api.url.clone();
    let named = c
        .submit(json!({"adapter": "noop", "name": "dashboard-named"}))
        .await;
    let other = c
        .submit(json!({"adapter": "noop", "name": "dashboard-other"}))
        .await;
    for id in [named, other] {
        c.wait_for_status(id, TaskStatus::Completed, PATIENCE).await;
    }

    // The page and its files, from the binary, with their types and tags.
    let page = get(&format!("{base}/")).await;
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    for (file, kind) in [
        ("app.js", "text/javascript"),
        ("style.css", "text/css"),
        ("uPlot.iife.min.js", "text/javascript"),
        ("uPlot.min.css", "text/css"),
    ] {
        let r = get(&format!("{base}/assets/{file}")).await;
        assert_eq!(r.status(), 200, "{file}");
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with(kind));
        let tag = r.headers()["etag"].clone();
        let again = reqwest::Client::new()
            .get(format!("{base}/assets/{file}"))
            .header("if-none-match", tag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{file} revalidates");
    }
    assert_eq!(get(&format!("{base}/assets/nope.js")).await.status(), 404);

    // GET /v1/tasks?name= lists the tasks of that name only.
    let listed: Value = get(&format!("{base}/v1/tasks?name=dashboard-named"))
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<u64> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [named]);

    // GET /v1/activity counts both completed attempts in this minute.
    let activity: Value = get(&format!("{base}/v1/activity?minutes=5"))
        .await
        .json()
        .await
        .unwrap();
    let minutes = activity["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 5, "{activity}");
    let completed: u64 = minutes
        .iter()
        .map(|m| m["completed"].as_u64().unwrap())
        .sum();
    assert_eq!(completed, 2, "{activity}");
    for bad in ["minutes=0", "minutes=61", "minutes=x", "colour=red"] {
        let r = get(&format!("{base}/v1/activity?{bad}")).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
    assert_eq!(
        get(&format!("{base}/v1/tasks?nam=x")).await.status(),
        400,
        "an unknown filter is refused"
    );
}
