//! `trainyard demo --stay`: the demo prints the dashboard's URL, the URL
//! serves the dashboard while the demo runs, the cluster stays up after
//! its tasks end, and Ctrl-C (SIGINT) stops everything it started, with
//! the exit status saying whether every task completed.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The next line of the demo's output containing `text`, within `limit`.
fn line_with(
    lines: &mpsc::Receiver<String>,
    text: &str,
    limit: Duration,
    seen: &mut String,
) -> String {
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains(text) {
                    return line;
                }
            }
            Err(_) => panic!("the demo never printed {text:?}; its output:\n{seen}"),
        }
    }
}

#[tokio::test]
async fn the_demo_prints_its_dashboard_and_stays_up_until_interrupted() {
    let (redis_url, _redis) = trainyard_testkit::redis_url();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(["demo", "--tasks", "1", "--episodes", "20", "--stay"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TRAINYARD_REDIS_URL", &redis_url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let out = demo.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let printed = line_with(&lines, "Dashboard: ", Duration::from_secs(120), &mut seen);
    let url = printed
        .split_whitespace()
        .find(|w| w.starts_with("http"))
        .unwrap_or_else(|| panic!("no URL in {printed:?}"))
        .to_string();

    line_with(
        &lines,
        "Press Ctrl-C to stop",
        Duration::from_secs(180),
        &mut seen,
    );
    // The tasks are over and the cluster still serves the dashboard.
    let page = reqwest::get(&url).await.expect("the dashboard answers");
    assert_eq!(page.status(), 200);
    assert!(page
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("text/html")));
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    let tasks: serde_json::Value = reqwest::get(format!("{url}v1/tasks"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tasks["tasks"][0]["status"], "COMPLETED", "{tasks}");

    kill(Pid::from_raw(demo.id() as i32), Signal::SIGINT).expect("interrupt the demo");
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < until, "the demo did not stop on Ctrl-C");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}\n{seen}");
    assert!(
        reqwest::get(&url).await.is_err(),
        "the master stopped with the demo"
    );
}
