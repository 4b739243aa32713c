//! `trainyard demo` and `trainyard dev` for real: with `--stay` the demo prints the dashboard's
//! URL, the URL serves the dashboard while the demo runs, the cluster stays
//! up after its tasks end, and Ctrl-C (SIGINT) stops everything it started,
//! with the exit status saying whether every task completed. With
//! `--cartpole` its hosts build CartPole's Python environment and train
//! CartPole beside the grid world, and every task completes. `trainyard dev
//! ADAPTER.wasm` runs a cluster around one adapter, says how to submit to
//! it, runs what is submitted, and stops on Ctrl-C, leaving nothing behind.
//! The tests run at once: each keeps to a directory and Redis keys of its
//! own.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `trainyard demo` and the lines it has printed.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Everything read so far, for failure messages.
    seen: String,
    /// Keeps the private Redis up while the demo runs.
    _redis: Option<trainyard_testkit::RedisServer>,
}

impl Demo {
    /// Starts `trainyard demo <args>` in the project's directory.
    fn start(args: &[&str]) -> Demo {
        let mut all = vec!["demo"];
        all.extend_from_slice(args);
        Demo::launch(&all, Path::new(env!("CARGO_MANIFEST_DIR")))
    }

    /// Starts `trainyard <args>` in `dir`, with a Redis of the test's own.
    fn launch(args: &[&str], dir: &Path) -> Demo {
        let (redis_url, redis) = trainyard_testkit::redis_url();
        let mut child = Command::new(env!("CARGO_BIN_EXE_trainyard"))
            .args(args)
            .current_dir(dir)
            .env("TRAINYARD_REDIS_URL", &redis_url)
            // What the adapter tools compile: a cache of the suite's own.
            .env("XDG_CACHE_HOME", crate::common::user_cache_home())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the demo");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Demo {
            child,
            lines,
            seen: String::new(),
            _redis: redis,
        }
    }

    /// The next line of the demo's output containing `text`, within `limit`.
    fn line_with(&mut self, text: &str, limit: Duration) -> String {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "the demo never printed {text:?}; its output:\n{}",
                    self.seen
                ),
            }
        }
    }

    /// The dashboard's URL, once the demo prints it.
    fn dashboard(&mut self) -> String {
        let printed = self.line_with("Dashboard: ", Duration::from_secs(120));
        printed
            .split_whitespace()
            .find(|w| w.starts_with("http"))
            .unwrap_or_else(|| panic!("no URL in {printed:?}"))
            .to_string()
    }

    /// Sends Ctrl-C (SIGINT) and waits for the demo to exit.
    fn interrupt(&mut self) -> ExitStatus {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT).expect("interrupt the demo");
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < until, "the demo did not stop on Ctrl-C");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The tasks the master at `url` lists.
async fn tasks(url: &str) -> Vec<Value> {
    let page: Value = reqwest::get(format!("{url}v1/tasks"))
        .await
        .expect("the master answers")
        .json()
        .await
        .unwrap();
    page["tasks"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_demo_prints_its_dashboard_and_stays_up_until_interrupted() {
    let mut demo = Demo::start(&["--tasks", "1", "--episodes", "20", "--stay"]);
    let url = demo.dashboard();
    demo.line_with("Press Ctrl-C to stop", Duration::from_secs(180));
    // The tasks are over and the cluster still serves the dashboard.
    let page = reqwest::get(&url).await.expect("the dashboard answers");
    assert_eq!(page.status(), 200);
    assert!(page
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap().starts_with("text/html")));
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    let listed = tasks(&url).await;
    assert_eq!(listed[0]["status"], "COMPLETED", "{listed:?}");

    let status = demo.interrupt();
    assert!(status.success(), "{status}\n{}", demo.seen);
    assert!(
        reqwest::get(&url).await.is_err(),
        "the master stopped with the demo"
    );
}

#[tokio::test]
async fn the_cartpole_demo_trains_cartpole_beside_the_grid_world_and_completes() {
    let mut demo = Demo::start(&["--cartpole", "--tasks", "1", "--episodes", "20", "--stay"]);
    let url = demo.dashboard();
    // The hosts build CartPole's environment before its first episode.
    demo.line_with("Press Ctrl-C to stop", Duration::from_secs(420));
    let listed = tasks(&url).await;
    let of = |adapter: &str| -> Vec<&Value> {
        listed.iter().filter(|t| t["adapter"] == adapter).collect()
    };
    assert_eq!(of("python-trainer").len(), 1, "{listed:#?}");
    assert_eq!(of("cartpole").len(), 2, "{listed:#?}");
    for task in &listed {
        assert_eq!(task["status"], "COMPLETED", "{task:#}\n{}", demo.seen);
    }
    for task in of("cartpole") {
        let metrics = &task["result"]["metrics"];
        assert_eq!(metrics["episodes"], 300.0, "{task:#}");
        assert!(metrics["mean_return"].is_number(), "{task:#}");
    }

    let status = demo.interrupt();
    assert!(
        status.success(),
        "every task completed: {status}\n{}",
        demo.seen
    );
}

#[tokio::test]
async fn dev_runs_a_cluster_around_one_adapter_until_interrupted() {
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("adapters/dist/python-trainer.wasm");
    assert!(adapter.exists(), "run `make -C adapters build`");
    let project = tempfile::tempdir().unwrap();
    let mut dev = Demo::launch(
        &["dev", adapter.to_str().unwrap(), "--program", "python3"],
        project.path(),
    );
    let dir = dev.line_with("Cluster directory: ", Duration::from_secs(120));
    let dir = PathBuf::from(
        dir.trim_start_matches("Cluster directory: ")
            .split(" (")
            .next()
            .unwrap(),
    );
    let url = dev.dashboard();
    let submit = dev.line_with("submit --adapter python-trainer", Duration::from_secs(60));
    dev.line_with("Press Ctrl-C to stop", Duration::from_secs(60));
    // The command it prints reaches its cluster.
    let words: Vec<&str> = submit.split_whitespace().collect();
    assert_eq!(&words[..2], ["trainyard", "--config"], "{submit}");
    let out = Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(&words[1..])
        .args(["--param", "episodes=20"])
        .env_remove("TRAINYARD_CONFIG")
        .output()
        .expect("run the printed command");
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        dev.seen
    );
    let listed = tasks(&url).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["status"], "COMPLETED", "{listed:?}");
    assert_eq!(listed[0]["adapter"], "python-trainer");
    assert!(reqwest::get(&url).await.unwrap().status().is_success());

    let status = dev.interrupt();
    assert!(status.success(), "{status}\n{}", dev.seen);
    assert!(
        reqwest::get(&url).await.is_err(),
        "the master stopped with dev"
    );
    assert!(!dir.exists(), "{} was left behind", dir.display());
    let written: Vec<_> = std::fs::read_dir(project.path()).unwrap().collect();
    assert!(
        written.is_empty(),
        "dev wrote into the directory it ran in: {written:?}"
    );
}
