//! `trainyard adapter run`: one attempt of a real adapter, with a real
//! trainer under the host's supervisor and containment, on this machine
//! alone. Every run points Redis and the database at a closed port and
//! names no master, so an attempt that needed any of them would fail.

use crate::common;

use common::{explain, stdout};

use std::path::{Path, PathBuf};
use std::process::Output;

/// A run of `trainyard adapter run ARGS…` in a fresh directory (no config
/// file, a compiled-component cache of its own), with no cluster at all.
struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    fn new() -> Run {
        Run {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    fn adapter_run(&self, adapter: &str, args: &[&str]) -> Output {
        self.command(adapter, args)
            .output()
            .expect("run trainyard adapter run")
    }

    fn command(&self, adapter: &str, args: &[&str]) -> std::process::Command {
        let closed = format!("127.0.0.1:{}", trainyard_testkit::free_port());
        let mut command = std::process::Command::new(&common::binaries().trainyard);
        command
            .current_dir(self.dir.path())
            .arg("adapter")
            .arg("run")
            .arg(common::adapter(adapter))
            .args(args)
            .env_clear()
            // Trainers run as an unprivileged user, who reaches the system's
            // programs only.
            .env("PATH", trainyard::cluster::SYSTEM_PATH)
            .env("TRAINYARD_REDIS_URL", format!("redis://{closed}"))
            .env(
                "TRAINYARD_DATABASE_URL",
                format!("postgres://{closed}/none"),
            )
            .env("TRAINYARD_HOST__MASTER", &closed)
            .env("XDG_CACHE_HOME", common::user_cache_home());
        command
    }
}

/// The path after `workspace kept at `.
fn kept_workspace(out: &Output) -> PathBuf {
    let text = stdout(out);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("workspace kept at "))
        .unwrap_or_else(|| panic!("no kept workspace printed\n{}", explain(out)));
    PathBuf::from(line)
}

#[test]
fn the_python_trainer_runs_a_real_trainer_to_success_with_no_cluster() {
    let run = Run::new();
    let out = run.adapter_run(
        "python-trainer",
        &[
            "--program",
            "python3",
            "--param",
            "episodes=60",
            "--param",
            "seed=3",
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(text.contains("adapter python-trainer "), "{text}");
    assert!(text.contains("[progress] episode 60/60"), "{text}");
    assert!(text.contains("result: completed"), "{text}");
    assert!(text.contains("  metric "), "{text}");
    assert!(text.contains("trainer: exited with 0"), "{text}");
    let progress = text.lines().position(|l| l.starts_with("[progress]"));
    let result = text.lines().position(|l| l.starts_with("result:"));
    assert!(
        progress < result,
        "progress comes as it happens, before the result\n{text}"
    );
}

#[test]
fn bad_params_exit_non_zero_with_the_non_retryable_error_printed() {
    let run = Run::new();
    let out = run.adapter_run(
        "python-trainer",
        &[
            "--program",
            "python3",
            "--params",
            r#"{"episodes": "lots"}"#,
        ],
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    assert!(text.contains("not retryable"), "{text}");
    assert!(text.contains("\"episodes\" must be"), "{text}");
    assert!(
        !text.contains("trainer:"),
        "no trainer was launched\n{text}"
    );
}

#[test]
fn a_failing_trainer_has_its_stderr_tail_printed() {
    let run = Run::new();
    let script = "import sys\nprint('starting', flush=True)\n\
                  sys.stderr.write('Traceback: the reward went NaN at episode 7\\n')\nsys.exit(3)\n";
    let params = serde_json::json!({ "script": script }).to_string();
    let out = run.adapter_run(
        "script-trainer",
        &["--program", "python3", "--params", &params],
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    assert!(text.contains("[stdout] starting"), "{text}");
    assert!(text.contains("trainer: exited with 3"), "{text}");
    let tail = text
        .split("trainer stderr (last lines):")
        .nth(1)
        .unwrap_or_else(|| panic!("no stderr tail\n{text}"));
    assert!(tail.contains("the reward went NaN at episode 7"), "{text}");
}

/// A script that prints its working directory and leaves a file there.
const LEAVES_A_FILE: &str = "import os\nprint('cwd=' + os.getcwd(), flush=True)\n\
                             open('verdict.txt', 'w').write('left behind')\n";

fn printed_cwd(out: &Output) -> PathBuf {
    let text = stdout(out);
    let cwd = text
        .lines()
        .find_map(|l| l.strip_prefix("[stdout] cwd="))
        .unwrap_or_else(|| panic!("no cwd printed\n{}", explain(out)));
    PathBuf::from(cwd)
}

#[test]
fn keep_workspace_leaves_the_trainers_files_and_says_where() {
    let run = Run::new();
    let params = serde_json::json!({ "script": LEAVES_A_FILE }).to_string();
    let args = ["--program", "python3", "--params", &params];
    let out = run.adapter_run("script-trainer", &args);
    assert!(out.status.success(), "{}", explain(&out));
    let cwd = printed_cwd(&out);
    assert!(
        !cwd.exists(),
        "without --keep-workspace {} is removed",
        cwd.display()
    );
    assert!(!stdout(&out).contains("workspace kept"));

    let out = run.adapter_run(
        "script-trainer",
        &[&args[..], &["--keep-workspace"]].concat(),
    );
    assert!(out.status.success(), "{}", explain(&out));
    let kept = kept_workspace(&out);
    assert_eq!(
        kept,
        printed_cwd(&out),
        "the workspace printed is the trainer's"
    );
    let left = std::fs::read_to_string(kept.join("verdict.txt")).expect("the trainer's file");
    assert_eq!(left, "left behind");
    let _ = std::fs::remove_dir_all(kept.parent().and_then(Path::parent).expect("scratch dir"));
}

#[test]
fn resume_hands_the_checkpoint_over_to_the_adapter() {
    let run = Run::new();
    let first = run.adapter_run(
        "python-trainer",
        &[
            "--program",
            "python3",
            "--params",
            r#"{"episodes": 60, "checkpoint_every": 20, "seed": 1}"#,
            "--keep-workspace",
        ],
    );
    assert!(first.status.success(), "{}", explain(&first));
    assert!(
        stdout(&first).contains("[checkpoint] checkpoint.json"),
        "{}",
        stdout(&first)
    );
    let kept = kept_workspace(&first);
    let checkpoint = run.dir.path().join("checkpoint.json");
    std::fs::copy(kept.join("checkpoint.json"), &checkpoint).expect("the first run's checkpoint");
    let _ = std::fs::remove_dir_all(kept.parent().and_then(Path::parent).expect("scratch dir"));

    let second = run.adapter_run(
        "python-trainer",
        &[
            "--program",
            "python3",
            "--params",
            r#"{"episodes": 90, "seed": 1}"#,
            "--resume",
            checkpoint.to_str().expect("utf-8 path"),
        ],
    );
    let text = stdout(&second);
    assert!(second.status.success(), "{}", explain(&second));
    assert!(
        text.contains(r#"[stdout] {"type":"resumed","from_episode":60}"#),
        "the adapter passed the checkpoint to its trainer\n{text}"
    );
    assert!(text.contains("— resumed from episode 60"), "{text}");
    let first_episode = text
        .lines()
        .find_map(|l| l.strip_prefix("[progress] episode ")?.split_once('/'))
        .map(|(episode, _)| episode.to_owned());
    assert_eq!(
        first_episode.as_deref(),
        Some("61"),
        "it did not start over\n{text}"
    );
    assert!(text.contains("[progress] episode 90/90"), "{text}");
}

#[test]
fn ctrl_c_stops_the_trainer_as_a_cancel_and_removes_the_workspace() {
    use std::io::{BufRead, BufReader};
    let run = Run::new();
    let script = "import os, time\nprint('cwd=' + os.getcwd(), flush=True)\ntime.sleep(120)\n";
    let params = serde_json::json!({ "script": script }).to_string();
    let mut child = run
        .command(
            "script-trainer",
            &["--program", "python3", "--params", &params],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start trainyard adapter run");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = vec![];
    let cwd = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("ended before the trainer ran: {printed:?}"))
            .expect("a line");
        if let Some(cwd) = line.strip_prefix("[stdout] cwd=") {
            break PathBuf::from(cwd);
        }
        printed.push(line);
    };
    assert!(cwd.exists());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("exit status");
    assert_eq!(status.code(), Some(1), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.starts_with("result: cancelled")),
        "{rest:?}"
    );
    assert!(!cwd.exists(), "the workspace {} is removed", cwd.display());
}

#[test]
fn requirements_give_the_trainer_a_python_environment_built_from_them() {
    let run = Run::new();
    let wheels = run.dir.path().join("wheels");
    trainyard_testkit::write_tiny_wheel(&wheels);
    let requirements = run.dir.path().join("requirements.txt");
    std::fs::write(
        &requirements,
        "# offline, from the wheel directory\ntinypkg>=1\n",
    )
    .unwrap();
    let script = "import sys, tinypkg\nprint('value', tinypkg.VALUE, flush=True)\n\
                  print('prefix', sys.prefix, flush=True)\n";
    let params = serde_json::json!({ "script": script }).to_string();
    let uv = format!("host.python.uv={}", trainyard_testkit::uv().display());
    let links = format!("host.python.find_links=[{}]", wheels.display());
    let out = run.adapter_run(
        "script-trainer",
        &[
            "--program",
            "python3",
            "--params",
            &params,
            "--requirements",
            requirements.to_str().expect("utf-8 path"),
            "--set",
            &uv,
            "--set",
            &links,
            "--set",
            "host.python.no_index=true",
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", explain(&out));
    assert!(
        text.contains("[stdout] value 42"),
        "the trainer imported the package\n{text}"
    );
    assert!(
        !text.contains("[stdout] prefix /usr\n"),
        "not the system's Python\n{text}"
    );
}

#[test]
fn a_program_the_trainers_user_cannot_run_is_refused_before_anything_runs() {
    let run = Run::new();
    let (bin, blocked) = common::unreachable_python(run.dir.path());
    let out = run
        .command(
            "python-trainer",
            &["--program", "python3", "--param", "episodes=5"],
        )
        .env(
            "PATH",
            format!("{}:{}", bin.display(), trainyard::cluster::SYSTEM_PATH),
        )
        .output()
        .expect("run trainyard adapter run");
    assert!(!out.status.success(), "{}", explain(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("program \"python3\" resolves to")
            && stderr.contains(&format!("{} does not let it through", blocked.display()))
            && stderr.contains("install the program where \"nobody\" can reach it"),
        "{}",
        explain(&out)
    );
    assert!(
        !stdout(&out).contains("result:"),
        "nothing ran: {}",
        explain(&out)
    );
}
