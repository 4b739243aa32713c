//! Trainer processes under a real `trainyard-supervise`: output, environment,
//! lease deadlines, stop and kill, the host going away, and many at once.
//!
//! Time bounds here are generous limits on safety properties ("killed within
//! 10 s of a 300 ms deadline"), never speed measurements.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use trainyard_host::process::{Deadline, ExitKind, LaunchSpec, SpawnError, Trainer, TrainerExit};

const SUPERVISOR: &str = env!("CARGO_BIN_EXE_trainyard-supervise");
/// Far longer than anything here should take; hitting it is a failure.
const PATIENCE: Duration = Duration::from_secs(20);

/// The descriptor-leak test counts this process's descriptors, so it runs
/// alone; every other test holds the lock shared.
static DESCRIPTORS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    DESCRIPTORS.read().await
}

fn sh(workspace: &Path, script: &str) -> LaunchSpec {
    LaunchSpec {
        executable: PathBuf::from("/bin/sh"),
        program_name: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        workspace: workspace.to_path_buf(),
        supervisor: PathBuf::from(SUPERVISOR),
        max_line_bytes: 64 * 1024,
        stderr_tail_bytes: 4096,
        confinement: None,
        logs: None,
    }
}

fn far_deadline() -> Deadline {
    Deadline::after(Duration::from_secs(3600))
}

/// Collects every stdout line in a task of its own, as a host would.
fn collect(mut lines: mpsc::Receiver<String>) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(line) = lines.recv().await {
            all.push(line);
        }
        all
    })
}

async fn wait(trainer: Trainer) -> TrainerExit {
    tokio::time::timeout(PATIENCE, trainer.wait())
        .await
        .expect("the trainer did not end in time")
}

async fn run(spec: LaunchSpec) -> (TrainerExit, Vec<String>) {
    let (trainer, lines) = Trainer::spawn(spec, far_deadline()).await.expect("spawn");
    let lines = collect(lines);
    let exit = wait(trainer).await;
    (exit, lines.await.expect("collector"))
}

/// Processes of process group `pgid` that are still running (zombies are
/// dead and do not count).
fn live_group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc") {
        let Ok(entry) = entry else { continue };
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some((state, _ppid, pgrp)) = proc_stat(pid) else {
            continue;
        };
        if pgrp == pgid && !matches!(state, 'Z' | 'X') {
            members.push(pid);
        }
    }
    members
}

/// State, parent pid and process group of `pid`, from `/proc/<pid>/stat`.
fn proc_stat(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

fn is_running(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _, _)| !matches!(state, 'Z' | 'X'))
}

async fn eventually_no_group(pgid: u32) {
    let start = Instant::now();
    while !live_group_members(pgid).is_empty() {
        assert!(
            start.elapsed() < PATIENCE,
            "processes of group {pgid} still run: {:?}",
            live_group_members(pgid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The supervisor of a running trainer is its parent.
fn supervisor_of(trainer: &Trainer) -> i32 {
    let (_, ppid, _) = proc_stat(trainer.pid()).expect("trainer's /proc entry");
    ppid as i32
}

fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("kill");
}

/// A trainer that prints the pid of a background grandchild, then sleeps.
const WITH_GRANDCHILD: &str = "sleep 300 & echo $!; sleep 300";

/// Spawns [`WITH_GRANDCHILD`] and returns it with the grandchild's pid.
async fn spawn_with_grandchild(
    workspace: &Path,
    deadline: Deadline,
) -> (Trainer, u32, mpsc::Receiver<String>) {
    let (trainer, mut lines) = Trainer::spawn(sh(workspace, WITH_GRANDCHILD), deadline)
        .await
        .expect("spawn");
    let grandchild = tokio::time::timeout(PATIENCE, lines.recv())
        .await
        .expect("the trainer printed nothing")
        .expect("stdout closed early")
        .parse()
        .expect("a pid");
    assert!(is_running(grandchild));
    assert_eq!(
        proc_stat(grandchild).map(|s| s.2),
        Some(trainer.pid()),
        "grandchild in the trainer's group"
    );
    (trainer, grandchild, lines)
}

#[tokio::test]
async fn stdout_lines_arrive_in_order_and_complete() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let script =
        "i=1; while [ $i -le 3000 ]; do echo \"line $i\"; i=$((i+1)); done; printf 'no newline'";
    let (exit, lines) = run(sh(dir.path(), script)).await;
    assert_eq!(exit.status, ExitKind::Exited(0));
    let mut expected: Vec<String> = (1..=3000).map(|i| format!("line {i}")).collect();
    expected.push("no newline".into());
    assert_eq!(lines, expected);
    assert_eq!(exit.truncated_lines, 0);
}

#[tokio::test]
async fn an_overlong_line_is_cut_counted_and_the_next_line_is_whole() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        "head -c 100000 /dev/zero | tr '\\000' x; echo; echo after",
    );
    spec.max_line_bytes = 100;
    let (exit, lines) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(0));
    assert_eq!(lines, ["x".repeat(100), "after".to_string()]);
    assert_eq!(exit.truncated_lines, 1);
}

#[tokio::test]
async fn invalid_utf8_in_stdout_is_replaced() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (_, lines) = run(sh(dir.path(), "printf 'ok \\377\\n'")).await;
    assert_eq!(lines, ["ok \u{FFFD}"]);
}

#[tokio::test]
async fn the_stderr_tail_is_the_end_of_stderr_and_bounded() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        "head -c 200000 /dev/zero | tr '\\000' w >&2; echo 'Traceback: THE END' >&2; exit 3",
    );
    spec.stderr_tail_bytes = 64;
    let (exit, _) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(3));
    assert!(
        exit.stderr_tail.len() <= 64,
        "{} bytes kept",
        exit.stderr_tail.len()
    );
    assert!(
        exit.stderr_tail.ends_with("Traceback: THE END\n"),
        "{:?}",
        exit.stderr_tail
    );
    assert!(exit.stderr_tail.starts_with('w'));
}

#[tokio::test]
async fn the_trainer_gets_exactly_the_given_environment() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = LaunchSpec {
        executable: PathBuf::from("/usr/bin/env"),
        program_name: "env".into(),
        args: vec![],
        env: vec![
            ("TRAINYARD_TASK".into(), "42".into()),
            ("WITH_SPACES".into(), "a b  c".into()),
        ],
        ..sh(dir.path(), "")
    };
    let (exit, mut lines) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(0));
    lines.sort();
    assert_eq!(lines, ["TRAINYARD_TASK=42", "WITH_SPACES=a b  c"]);
}

#[tokio::test]
async fn the_trainer_runs_in_the_workspace_under_the_requested_argv0() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = LaunchSpec {
        program_name: "python-trainer".into(),
        ..sh(dir.path(), "tr '\\000' ' ' < /proc/$$/cmdline; echo; pwd")
    };
    let (exit, lines) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(0));
    assert!(lines[0].starts_with("python-trainer -c "), "{:?}", lines[0]);
    assert_eq!(PathBuf::from(&lines[1]), dir.path().canonicalize().unwrap());
}

#[tokio::test]
async fn the_trainer_starts_with_no_signal_blocked_and_the_supervisors_ignored_signals_restored() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    // grep is the trainer itself here, so /proc/self is the trainer.
    let spec = LaunchSpec {
        executable: PathBuf::from("/bin/grep"),
        program_name: "grep".into(),
        args: vec![
            "-E".into(),
            "^Sig(Blk|Ign)".into(),
            "/proc/self/status".into(),
        ],
        ..sh(dir.path(), "")
    };
    let (exit, lines) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(0));
    let mask =
        |line: &str| u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
    assert_eq!(mask(&lines[0]), 0, "blocked signals: {}", lines[0]);
    // The supervisor ignores these (and blocks SIGTERM); none may stay
    // ignored in the trainer. (Whatever the test harness itself ignores is
    // inherited by every child and is not the supervisor's doing.)
    let ignored = mask(&lines[1]);
    for signal in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGHUP,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
        libc::SIGTERM,
    ] {
        assert_eq!(
            ignored & (1 << (signal - 1)),
            0,
            "signal {signal} is ignored in the trainer"
        );
    }
}

#[tokio::test]
async fn a_passing_deadline_kills_the_trainer_and_its_grandchild() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let deadline = Deadline::after(Duration::from_millis(300));
    let (trainer, grandchild, lines) = spawn_with_grandchild(dir.path(), deadline).await;
    let pid = trainer.pid();
    drop(lines);
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::LeaseExpired);
    // The supervisor reaps the whole group before it reports.
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
    assert!(!is_running(grandchild));
    assert!(Deadline::now() >= deadline);
}

#[tokio::test]
async fn moving_the_deadline_into_the_past_kills_at_once() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, grandchild, _lines) = spawn_with_grandchild(dir.path(), far_deadline()).await;
    let pid = trainer.pid();
    trainer.set_deadline(Deadline::now().saturating_sub(Duration::from_secs(1)));
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::LeaseExpired);
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
    assert!(!is_running(grandchild));
}

#[tokio::test]
async fn renewals_keep_the_trainer_alive_past_its_first_deadline() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let first_deadline = Deadline::after(Duration::from_secs(1));
    let (trainer, lines) = Trainer::spawn(sh(dir.path(), "sleep 3; echo survived"), first_deadline)
        .await
        .expect("spawn");
    let lines = collect(lines);
    let control = trainer.control();
    let renewer = tokio::spawn(async move {
        loop {
            control.set_deadline(Deadline::after(Duration::from_secs(2)));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let exit = wait(trainer).await;
    renewer.abort();
    assert_eq!(exit.status, ExitKind::Exited(0));
    assert_eq!(lines.await.unwrap(), ["survived"]);
    assert!(
        Deadline::now() > first_deadline,
        "the trainer outlived its first deadline"
    );
}

#[tokio::test]
async fn stop_ends_a_trainer_that_ignores_sigterm_with_sigkill_after_the_grace() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, mut lines) = Trainer::spawn(
        sh(dir.path(), "trap '' TERM; echo ready; sleep 300 & wait"),
        far_deadline(),
    )
    .await
    .expect("spawn");
    let ready = tokio::time::timeout(PATIENCE, lines.recv())
        .await
        .expect("ready");
    assert_eq!(ready.as_deref(), Some("ready"));
    let pid = trainer.pid();
    let grace = Duration::from_millis(500);
    let asked = Instant::now();
    trainer.stop(grace);
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::Signaled(libc::SIGKILL));
    assert!(asked.elapsed() >= grace, "killed before the grace ran out");
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
}

#[tokio::test]
async fn stop_ends_a_trainer_that_honours_sigterm_with_sigterm() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = LaunchSpec {
        executable: PathBuf::from("/bin/sleep"),
        program_name: "sleep".into(),
        args: vec!["300".into()],
        ..sh(dir.path(), "")
    };
    let (trainer, _lines) = Trainer::spawn(spec, far_deadline()).await.expect("spawn");
    trainer.stop(Duration::from_secs(3600));
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::Signaled(libc::SIGTERM));
}

#[tokio::test]
async fn kill_ends_the_trainer_and_its_group() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, grandchild, _lines) = spawn_with_grandchild(dir.path(), far_deadline()).await;
    let pid = trainer.pid();
    trainer.kill();
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::Signaled(libc::SIGKILL));
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
    assert!(!is_running(grandchild));
}

#[tokio::test]
async fn dropping_the_trainer_kills_its_group() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, grandchild, lines) = spawn_with_grandchild(dir.path(), far_deadline()).await;
    let pid = trainer.pid();
    drop(trainer);
    drop(lines);
    eventually_no_group(pid).await;
    assert!(!is_running(grandchild));
}

#[tokio::test]
async fn terminal_signals_do_not_reach_trainers_but_sigterm_to_the_supervisor_ends_them() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, grandchild, _lines) = spawn_with_grandchild(dir.path(), far_deadline()).await;
    let pid = trainer.pid();
    let supervisor = supervisor_of(&trainer);
    use nix::sys::signal::Signal;
    for terminal in [
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGHUP,
        Signal::SIGTSTP,
    ] {
        signal(supervisor, terminal);
    }
    signal(supervisor, Signal::SIGTERM);
    let exit = wait(trainer).await;
    // Had any terminal signal ended the supervisor, no report would have come.
    assert_eq!(exit.status, ExitKind::Signaled(libc::SIGKILL));
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
    assert!(!is_running(grandchild));
}

#[tokio::test]
async fn a_killed_supervisor_leaves_no_process_of_the_group_behind() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, grandchild, _lines) = spawn_with_grandchild(dir.path(), far_deadline()).await;
    let pid = trainer.pid();
    signal(supervisor_of(&trainer), nix::sys::signal::Signal::SIGKILL);
    let exit = wait(trainer).await;
    let ExitKind::SupervisorLost(reason) = &exit.status else {
        panic!("expected SupervisorLost, got {:?}", exit.status);
    };
    assert!(reason.contains("without a final report"), "{reason}");
    eventually_no_group(pid).await;
    assert!(!is_running(grandchild));
}

#[tokio::test]
async fn a_dropped_receiver_does_not_block_the_trainer() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let (trainer, lines) = Trainer::spawn(
        sh(dir.path(), "i=0; while [ $i -lt 200 ]; do head -c 10000 /dev/zero | tr '\\000' y; echo; i=$((i+1)); done"),
        far_deadline(),
    )
    .await
    .expect("spawn");
    drop(lines);
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::Exited(0));
}

#[tokio::test]
async fn a_missing_executable_is_a_clear_spawn_error() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = LaunchSpec {
        executable: PathBuf::from("/nonexistent/python3"),
        program_name: "python3".into(),
        ..sh(dir.path(), "")
    };
    let error = Trainer::spawn(spec, far_deadline())
        .await
        .expect_err("spawn must fail");
    assert!(matches!(error, SpawnError::Trainer(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        "cannot execute /nonexistent/python3: No such file or directory"
    );
}

#[tokio::test]
async fn a_missing_supervisor_or_workspace_is_a_clear_spawn_error() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = LaunchSpec {
        supervisor: PathBuf::from("/nonexistent/trainyard-supervise"),
        ..sh(dir.path(), "true")
    };
    let error = Trainer::spawn(spec, far_deadline())
        .await
        .expect_err("spawn must fail");
    assert!(
        error
            .to_string()
            .contains("/nonexistent/trainyard-supervise"),
        "{error}"
    );
    let spec = sh(&dir.path().join("missing"), "true");
    let error = Trainer::spawn(spec, far_deadline())
        .await
        .expect_err("spawn must fail");
    assert!(matches!(error, SpawnError::Workspace { .. }), "{error:?}");
}

#[tokio::test]
async fn a_deadline_already_past_starts_nothing() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let past = Deadline::now().saturating_sub(Duration::from_millis(1));
    let error = Trainer::spawn(sh(dir.path(), "touch started"), past)
        .await
        .expect_err("spawn must fail");
    assert!(matches!(error, SpawnError::DeadlinePassed), "{error:?}");
    assert!(!dir.path().join("started").exists());
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_trainers_at_once_all_work_and_leak_no_descriptors() {
    let _alone = DESCRIPTORS.write().await;
    let dir = tempfile::tempdir().unwrap();
    // One run first, so descriptors the runtime opens once (signal pipes,
    // the child reaper) are there before counting.
    let (warm_up, _) = run(sh(dir.path(), "true")).await;
    assert_eq!(warm_up.status, ExitKind::Exited(0));
    let before = open_descriptors();

    let runs = (0..50).map(|n| {
        let spec = LaunchSpec {
            args: vec![
                "-c".into(),
                "echo trainer-$1; exit $1".into(),
                "sh".into(),
                n.to_string(),
            ],
            ..sh(dir.path(), "")
        };
        tokio::spawn(async move { (n, run(spec).await) })
    });
    let mut seen = HashSet::new();
    for handle in runs.collect::<Vec<_>>() {
        let (n, (exit, lines)) = handle.await.expect("trainer task");
        assert_eq!(exit.status, ExitKind::Exited(n), "trainer {n}");
        assert_eq!(lines, [format!("trainer-{n}")]);
        seen.insert(n);
    }
    assert_eq!(seen.len(), 50);
    // Descriptors of a test that ran just before (a dropped trainer's
    // clean-up) may close a moment later; a leak stays open.
    let until = Instant::now() + Duration::from_secs(3);
    while open_descriptors() > before && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = open_descriptors();
    assert!(
        after <= before,
        "descriptors leaked: {before} open before, {after} after"
    );
}

#[test]
fn the_trainer_handle_can_be_shared_between_tasks() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Trainer>();
    send_and_sync::<trainyard_host::process::TrainerControl>();
}

#[tokio::test]
async fn the_trainer_reads_dev_null_and_inherits_no_control_socket() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    // Every descriptor the trainer holds, by what it points to.
    let (exit, lines) = run(sh(
        dir.path(),
        "for fd in /proc/$$/fd/*; do echo \"${fd##*/} $(readlink $fd)\"; done",
    ))
    .await;
    assert_eq!(exit.status, ExitKind::Exited(0));
    assert!(
        lines.iter().any(|l| l == "0 /dev/null"),
        "the trainer's standard input is not /dev/null: {lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("socket:")),
        "the supervisor's control socket reached the trainer: {lines:?}"
    );
}

#[tokio::test]
async fn a_confined_trainer_leaves_no_process_behind_whatever_its_session() {
    let _guard = shared().await;
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test makes a cgroup, which needs root"
    );
    let dir = tempfile::tempdir().unwrap();
    let cgroup = format!("trainyard/process-test-{}", std::process::id());
    // A survivor in a session of its own, which a process-group kill misses.
    let mut spec = sh(
        dir.path(),
        "setsid sh -c 'sleep 600 & echo $! > survivor' & wait; sleep 0.1",
    );
    spec.confinement = Some(trainyard_host::containment::Confinement {
        workspace: dir.path().to_path_buf(),
        cgroup: Some(format!("{cgroup}/attempt")),
        ..Default::default()
    });
    let (trainer, lines) = Trainer::spawn(spec, far_deadline()).await.unwrap();
    drop(lines);
    let exit = trainer.wait().await;
    assert_eq!(exit.status, ExitKind::Exited(0), "{}", exit.stderr_tail);
    let survivor: i32 = std::fs::read_to_string(dir.path().join("survivor"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !Path::new(&format!("/proc/{survivor}")).exists(),
        "the survivor {survivor} outlived its trainer's end"
    );
    assert!(
        !Path::new("/sys/fs/cgroup/pids")
            .join(&cgroup)
            .join("attempt")
            .exists()
            && !Path::new("/sys/fs/cgroup")
                .join(&cgroup)
                .join("attempt")
                .exists()
    );
    trainyard_host::containment::cgroup::remove_empty_tree(&cgroup);
}

fn confined(workspace: &Path) -> trainyard_host::containment::Confinement {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test makes namespaces, which needs root"
    );
    trainyard_host::containment::Confinement {
        workspace: workspace.to_path_buf(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_trainer_in_a_pid_namespace_sees_only_its_own_processes_and_its_exit_passes_through() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        "echo pid $$; for p in /proc/[0-9]*; do echo seen ${p#/proc/}; done; exit 3",
    );
    spec.confinement = Some(trainyard_host::containment::Confinement {
        pid_namespace: true,
        ..confined(dir.path())
    });
    let (exit, lines) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(3), "{}", exit.stderr_tail);
    // Its namespace's first process and itself: nothing of the machine.
    assert!(lines.contains(&"pid 2".to_string()), "{lines:?}");
    let seen: Vec<&String> = lines.iter().filter(|l| l.starts_with("seen")).collect();
    assert_eq!(seen, ["seen 1", "seen 2"], "{lines:?}");
}

#[tokio::test]
async fn a_stop_reaches_a_trainer_in_a_pid_namespace_whose_orphans_are_reaped() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    // An orphan that exits must not stay a zombie; one that lives on ends
    // with the namespace.
    let mut spec = sh(
        dir.path(),
        // An exited orphan is reaped soon, not at once: zombies are counted
        // until none is left, for up to two seconds.
        "trap 'for i in $(seq 40); do n=$(grep -l \"^State:.*Z\" /proc/[0-9]*/status 2>/dev/null | wc -l); \
           [ $n -eq 0 ] && break; sleep 0.05; done; echo zombies $n; exit 7' TERM; \
         (sh -c 'exit 0' &); (sleep 600 &); echo ready; while true; do sleep 0.05; done",
    );
    spec.confinement = Some(trainyard_host::containment::Confinement {
        pid_namespace: true,
        ..confined(dir.path())
    });
    let (trainer, mut lines) = Trainer::spawn(spec, far_deadline()).await.unwrap();
    let ready = tokio::time::timeout(PATIENCE, lines.recv()).await.unwrap();
    assert_eq!(ready.as_deref(), Some("ready"));
    let group = trainer.pid();
    trainer.control().stop(PATIENCE);
    let rest = collect(lines);
    let exit = wait(trainer).await;
    assert_eq!(exit.status, ExitKind::Exited(7), "{}", exit.stderr_tail);
    assert_eq!(rest.await.unwrap(), ["zombies 0"]);
    assert!(live_group_members(group).is_empty());
}

#[tokio::test]
async fn a_trainer_in_its_own_view_finds_only_what_it_was_given() {
    let _shared = shared().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("work/1-1");
    std::fs::create_dir_all(workspace.join("tmp")).unwrap();
    let root = dir.path().join("view-root");
    std::fs::create_dir(&root).unwrap();
    let read_only: Vec<PathBuf> = ["/usr", "/bin", "/lib", "/lib64", "/etc/ld.so.cache"]
        .map(PathBuf::from)
        .to_vec();
    let read_write = vec![workspace.clone(), PathBuf::from("/dev/null")];
    let view =
        trainyard_host::containment::view::plan(&root, &workspace, &read_only, &read_write, &[]);
    let mut spec = sh(
        &workspace,
        "ls -A / | tr '\\n' ' '; echo; ls -A /dev | tr '\\n' ' '; echo; pwd; \
         echo kept > result.txt; touch /usr/escape 2>/dev/null || echo usr read-only",
    );
    spec.confinement = Some(trainyard_host::containment::Confinement {
        view: Some(view),
        pid_namespace: true,
        ..confined(&workspace)
    });
    let (exit, lines) = run(spec).await;
    assert_eq!(exit.status, ExitKind::Exited(0), "{}", exit.stderr_tail);
    let top = dir.path().components().nth(1).unwrap();
    let top = top.as_os_str().to_string_lossy();
    let mut root_entries: Vec<&str> = lines[0].split_whitespace().collect();
    root_entries.sort();
    let mut expected = vec!["bin", "dev", "etc", "lib", "lib64", "proc", "usr", &*top];
    expected.sort();
    expected.dedup();
    assert_eq!(root_entries, expected, "{lines:?}");
    assert_eq!(
        lines[1].trim(),
        "fd null shm stderr stdin stdout",
        "{lines:?}"
    );
    assert_eq!(lines[2], workspace.display().to_string());
    assert_eq!(lines[3], "usr read-only");
    // The host reads what the trainer left once it has ended.
    assert_eq!(
        std::fs::read_to_string(workspace.join("result.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}
