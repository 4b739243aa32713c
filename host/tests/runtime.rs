//! The adapter runtime against real components from `adapters/dist/`: the
//! reference adapters produce the plans they should, and every attack of
//! the `hostile` adapter ends in a clear fault (or plan refusal) within a
//! bounded time, after which the same runtime and the same loaded adapter
//! still run a normal attempt. Components built against every version of
//! the contract (`wit/archive/`) load and run, and one of 0.1.2 reads the
//! resources its attempt was given.

mod support;

use std::os::unix::fs::MetadataExt;
use std::time::Instant;
use support::*;
use trainyard_host::adapters::plan::{self, Allowlist, PlanError};
use trainyard_host::runtime::{
    AdapterFault, AdapterRuntime, Call, CheckpointRef, ExitReport, ExitStatus, LaunchPlan,
    LoadError, RuntimeConfig,
};
use trainyard_proto::resources::Assignment;

fn fault_message(result: Result<impl std::fmt::Debug, AdapterFault>) -> String {
    result.expect_err("a fault").to_string()
}

/// The allowlist most tests use: `python3` from the host's PATH.
fn python_allowlist() -> Allowlist {
    Allowlist::resolve(&["python3".to_owned()], std::env::var_os("PATH").as_deref())
        .unwrap_or_else(|e| panic!("these tests need python3 on PATH: {e}"))
}

async fn hostile_plan(
    adapter: &trainyard_host::runtime::LoadedAdapter,
    params: &str,
) -> LaunchPlan {
    let attempt = Attempt::new(1);
    let mut instance = adapter
        .instantiate(attempt.context.clone())
        .await
        .expect("instantiate");
    instance
        .prepare(&task(&attempt, params))
        .await
        .expect("no fault")
        .expect("a plan")
}

// ---------------------------------------------------------------------------
// The reference adapters

#[tokio::test]
async fn the_built_adapters_load_and_describe_themselves() {
    let runtime = runtime();
    for (name, kinds) in [
        ("noop", vec!["noop"]),
        ("python-trainer", vec!["q-learning"]),
        ("test-trainer", vec!["q-learning"]),
        ("hostile", vec!["attack"]),
    ] {
        let adapter = load(&runtime, name).await;
        assert_eq!(adapter.info().name, name);
        assert_eq!(adapter.info().kinds, kinds);
        assert!(!adapter.info().version.is_empty());
        assert!(!adapter.description().is_empty());
        assert_eq!(adapter.path(), component(name));
    }
}

/// Whether the component at `adapters/dist/<name>.wasm` names `text` (its
/// imports and exports are named in the binary, versions and all).
fn names(name: &str, text: &str) -> bool {
    let bytes = std::fs::read(component(name)).expect("the component");
    bytes.windows(text.len()).any(|w| w == text.as_bytes())
}

/// The hostile adapter's `env-values` attempt, from `prepare` to `finish`,
/// with `assignment` given: what its summary says the host assigned.
async fn assignment_seen(
    adapter: &trainyard_host::runtime::LoadedAdapter,
    assignment: Assignment,
) -> serde_json::Value {
    let mut attempt = Attempt::new(5);
    attempt.context.assignment = assignment;
    let mut instance = adapter
        .instantiate(attempt.context.clone())
        .await
        .expect("instantiate");
    let params = r#"{"attack": "env-values", "names": ["TRAINYARD_GPUS"]}"#;
    instance
        .prepare(&task(&attempt, params))
        .await
        .expect("no fault")
        .expect("a plan");
    let exit = ExitReport {
        status: ExitStatus::Exited(0),
        stderr_tail: String::new(),
        duration_ms: 1,
    };
    let result = instance.finish(&exit).await.expect("no fault").expect("ok");
    let summary: serde_json::Value =
        serde_json::from_str(&result.summary.expect("a summary")).expect("JSON");
    summary["observed"][0]["assigned"].clone()
}

#[tokio::test]
async fn components_of_every_contract_version_load_and_declare_what_they_declare() {
    let runtime = runtime();
    // Built against 0.1.0 (wit/archive/0.1.0): no metadata export at all,
    // and a `host` import of 0.1.0 (its `prepare` logs when asked), which
    // the host's `host` of 0.1.2, with one more function, serves.
    assert!(names("script-trainer", "trainyard:adapter/adapter@0.1.0"));
    assert!(names("script-trainer", "trainyard:adapter/host@0.1.0"));
    let old = load(&runtime, "script-trainer").await;
    assert!(old.info().params_schemas.is_empty());
    assert!(old.info().result_metrics.is_empty());
    let attempt = Attempt::new(7);
    let mut instance = old
        .instantiate(attempt.context.clone())
        .await
        .expect("instantiate");
    let plan = instance
        .prepare(&task(&attempt, r#"{"script": "print(1)", "log": "old"}"#))
        .await
        .expect("no fault")
        .expect("a plan");
    assert_eq!(plan.command.expect("a command").program, "python3");
    // Built against 0.1.1's core world (wit/archive/0.1.1), which leaves
    // the metadata out; it runs an attempt to its result.
    assert!(names("noop", "trainyard:adapter/adapter@0.1.1"));
    let core = load(&runtime, "noop").await;
    assert!(core.info().result_metrics.is_empty());
    let mut instance = core.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, "{}"))
        .await
        .unwrap()
        .unwrap();
    let success = instance.finish(&not_launched()).await.unwrap().unwrap();
    assert_eq!(success.metrics[0].name, "ok");
    // Built against 0.1.2 with the metadata export: its result metrics.
    assert!(names("python-trainer", "trainyard:adapter/metadata@0.1.2"));
    let new = load(&runtime, "python-trainer").await;
    assert!(
        new.info().params_schemas.is_empty(),
        "it declares no schema"
    );
    for metric in [
        "mean_return",
        "success_rate",
        "eval_episodes",
        "final_epsilon",
    ] {
        assert!(
            new.info().result_metrics.iter().any(|m| m == metric),
            "{metric} in {:?}",
            new.info().result_metrics
        );
    }
}

#[tokio::test]
async fn an_adapter_of_0_1_2_reads_the_resources_its_attempt_was_given() {
    assert!(names("hostile", "trainyard:adapter/host@0.1.2"));
    assert!(names("hostile", "assigned-resources"));
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let given = Assignment {
        gpus: vec!["gpu3".into(), "gpu1".into()],
        cpus: Some(1.5),
        memory_bytes: Some(64 << 20),
    };
    assert_eq!(
        assignment_seen(&hostile, given).await,
        serde_json::json!({"gpus": ["gpu3", "gpu1"], "cpus": 1.5, "memory_bytes": 64 << 20})
    );
    // Nothing assigned (a local run, `adapter check`): an empty answer.
    assert_eq!(
        assignment_seen(&hostile, Assignment::default()).await,
        serde_json::json!({"gpus": [], "cpus": null, "memory_bytes": null})
    );
}

#[tokio::test]
async fn noop_plans_nothing_or_true_and_succeeds() {
    let runtime = runtime();
    let noop = load(&runtime, "noop").await;
    let attempt = Attempt::new(1);

    let mut instance = noop.instantiate(attempt.context.clone()).await.unwrap();
    let idle = instance
        .prepare(&task(&attempt, "{}"))
        .await
        .unwrap()
        .unwrap();
    assert!(idle.command.is_none() && idle.files.is_empty());
    let success = instance.finish(&not_launched()).await.unwrap().unwrap();
    assert_eq!(success.metrics.len(), 1);
    assert_eq!(
        (success.metrics[0].name.as_str(), success.metrics[0].value),
        ("ok", 1.0)
    );

    let mut instance = noop.instantiate(attempt.context.clone()).await.unwrap();
    let spawn = instance
        .prepare(&task(&attempt, r#"{"spawn": true}"#))
        .await
        .unwrap()
        .unwrap();
    let allowlist =
        Allowlist::resolve(&["true".to_owned()], std::env::var_os("PATH").as_deref()).unwrap();
    let valid = plan::validate(spawn, &allowlist).unwrap();
    let command = valid.command.expect("a command");
    assert_eq!(command.program, "true");
    assert!(command.args.is_empty());
    let failed = instance
        .finish(&ExitReport {
            status: ExitStatus::Exited(1),
            stderr_tail: String::new(),
            duration_ms: 3,
        })
        .await
        .unwrap()
        .unwrap_err();
    assert!(failed.retryable);
    assert!(
        failed.message.contains("exited with code 1"),
        "{}",
        failed.message
    );

    let mut instance = noop.instantiate(attempt.context.clone()).await.unwrap();
    let refused = instance
        .prepare(&task(&attempt, r#"{"episodes": 3}"#))
        .await
        .unwrap()
        .unwrap_err();
    assert!(!refused.retryable);
    assert!(
        refused.message.starts_with("invalid params"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn python_trainer_plans_python3_with_its_script_and_params() {
    let runtime = runtime();
    let trainer = load(&runtime, "python-trainer").await;
    let attempt = Attempt::new(7);

    let mut instance = trainer.instantiate(attempt.context.clone()).await.unwrap();
    let fresh = instance
        .prepare(&task(&attempt, r#"{"episodes": 20}"#))
        .await
        .unwrap()
        .unwrap();
    let valid = plan::validate(fresh, &python_allowlist()).expect("the plan passes the policy");
    let paths: Vec<&str> = valid.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["trainer.py", "params.json"]);
    let params: serde_json::Value = serde_json::from_slice(&valid.files[1].contents).unwrap();
    assert_eq!(params["episodes"], 20);
    assert_eq!(params["step_delay_ms"], 0);
    let command = valid.command.expect("a command");
    assert_eq!(command.program, "python3");
    assert_eq!(
        command.args,
        ["-u", "trainer.py", "--config", "params.json"]
    );
    assert!(command
        .env
        .contains(&("PYTHONUNBUFFERED".to_owned(), "1".to_owned())));

    let mut resumed_task = task(&attempt, "{}");
    resumed_task.kind = "q-learning".to_owned();
    resumed_task.checkpoint = Some(CheckpointRef::WorkspaceFile("checkpoint.json".to_owned()));
    let mut instance = trainer.instantiate(attempt.context.clone()).await.unwrap();
    let resumed = instance.prepare(&resumed_task).await.unwrap().unwrap();
    let args = resumed.command.expect("a command").args;
    assert_eq!(args[args.len() - 2..], ["--resume", "checkpoint.json"]);

    let mut wrong_kind = task(&attempt, "{}");
    wrong_kind.kind = "ppo".to_owned();
    let mut instance = trainer.instantiate(attempt.context.clone()).await.unwrap();
    let refused = instance.prepare(&wrong_kind).await.unwrap().unwrap_err();
    assert!(!refused.retryable);
    assert!(refused.message.contains("\"ppo\""), "{}", refused.message);
}

#[tokio::test]
async fn test_hooks_are_unknown_to_the_shipped_trainer_and_planned_by_the_test_one() {
    let runtime = runtime();
    let attempt = Attempt::new(8);
    let hooks = r#"{"episodes": 20, "fail_at_episode": 5, "trace_file": "t.jsonl"}"#;

    let shipped = load(&runtime, "python-trainer").await;
    let mut instance = shipped.instantiate(attempt.context.clone()).await.unwrap();
    let refused = instance
        .prepare(&task(&attempt, hooks))
        .await
        .unwrap()
        .unwrap_err();
    assert!(!refused.retryable);
    assert!(
        refused.message.starts_with("invalid params: unknown key"),
        "{}",
        refused.message
    );

    let testing = load(&runtime, "test-trainer").await;
    let mut instance = testing.instantiate(attempt.context.clone()).await.unwrap();
    let planned = instance
        .prepare(&task(&attempt, hooks))
        .await
        .unwrap()
        .unwrap();
    let valid = plan::validate(planned, &python_allowlist()).expect("the plan passes the policy");
    let paths: Vec<&str> = valid.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        ["trainer.py", "params.json", "hooks.py", "hooks.json"]
    );
    let hooks: serde_json::Value = serde_json::from_slice(&valid.files[3].contents).unwrap();
    assert_eq!(hooks["trace_file"], "t.jsonl");
    assert_eq!(hooks["fail_at_episode"], 5);
    assert_eq!(hooks["task"], 8);
    assert_eq!(
        valid.command.expect("a command").args,
        [
            "-u",
            "hooks.py",
            "--hooks",
            "hooks.json",
            "--config",
            "params.json"
        ]
    );
}

// ---------------------------------------------------------------------------
// Deadlines, memory, traps

#[tokio::test]
async fn an_endless_loop_in_any_call_ends_at_the_deadline_and_the_host_keeps_serving() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    for (attack, call) in [
        ("loop-prepare", "prepare"),
        ("loop-output", "on-output"),
        ("loop-finish", "finish"),
    ] {
        let attempt = Attempt::new(2);
        let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
        let params = format!(r#"{{"attack":"{attack}"}}"#);
        let started = Instant::now();
        let fault = within(attack, async {
            instance
                .prepare(&task(&attempt, &params))
                .await?
                .expect("a plan");
            instance.on_output("line").await?;
            instance.finish(&not_launched()).await.map(|_| ())
        })
        .await
        .expect_err("a fault");
        assert_eq!(
            fault.to_string(),
            format!(r#"adapter "hostile" exceeded its 500 ms deadline in {call}"#)
        );
        assert!(
            started.elapsed() >= DEADLINE,
            "{attack} stopped before its deadline"
        );
        // The instance is dead: a later call returns the same fault.
        assert_eq!(instance.finish(&not_launched()).await.unwrap_err(), fault);
        run_benign(&hostile).await;
    }
}

#[tokio::test]
async fn a_guest_blocked_in_a_host_call_is_stopped_by_the_backstop() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(3);
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    let fault = within(
        "sleep",
        instance.prepare(&task(&attempt, r#"{"attack":"sleep"}"#)),
    )
    .await;
    assert_eq!(
        fault_message(fault),
        r#"adapter "hostile" exceeded its 500 ms deadline in prepare"#
    );
    run_benign(&hostile).await;
}

#[tokio::test]
async fn a_memory_bomb_is_reported_as_the_memory_limit() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(4);
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    let fault = within(
        "memory-bomb",
        instance.prepare(&task(&attempt, r#"{"attack":"memory-bomb"}"#)),
    )
    .await
    .expect_err("a fault");
    assert!(
        matches!(
            fault,
            AdapterFault::MemoryLimit {
                call: Call::Prepare,
                ..
            }
        ),
        "{fault:?}"
    );
    assert_eq!(
        fault.to_string(),
        r#"adapter "hostile" exceeded its memory limit of 16 MiB in prepare"#
    );
    run_benign(&hostile).await;
}

#[tokio::test]
async fn traps_panics_exits_and_stack_overflows_fail_only_their_attempt() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    for (attack, expected) in [
        ("trap", "unreachable"),
        ("panic", "hostile adapter panics on purpose"),
        ("exit", "it called exit("),
        // The guest's stack lives in its linear memory; running off its end
        // is an out-of-bounds access, not the engine's stack-overflow trap.
        ("stack-overflow", "wasm trap"),
    ] {
        let attempt = Attempt::new(5);
        let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
        let params = format!(r#"{{"attack":"{attack}"}}"#);
        let fault = within(attack, instance.prepare(&task(&attempt, &params)))
            .await
            .expect_err("a fault");
        let message = fault.to_string();
        assert!(
            matches!(
                fault,
                AdapterFault::Trap {
                    call: Call::Prepare,
                    ..
                }
            ),
            "{attack}: {fault:?}"
        );
        assert!(
            message.starts_with(r#"adapter "hostile" trapped in prepare: "#),
            "{message}"
        );
        assert!(message.contains(expected), "{attack}: {message}");
        run_benign(&hostile).await;
    }
}

// ---------------------------------------------------------------------------
// The filesystem and the network

#[tokio::test]
async fn reads_outside_the_workspace_find_nothing() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(6);
    // A host file right next to the workspace, standing for the host's config.
    let config = attempt.root.path().join("config.toml");
    std::fs::write(&config, "cluster_secret = \"do-not-leak\"\n").unwrap();
    let outside = [
        "/etc/passwd".to_owned(),
        "/workspace/../../etc/passwd".to_owned(),
        "/workspace/../config.toml".to_owned(),
        "/workspace/..".to_owned(),
        "../config.toml".to_owned(),
        config.display().to_string(),
        "/proc/self/environ".to_owned(),
        "/".to_owned(),
    ];
    let params = serde_json::json!({"attack": "read-file", "paths": outside}).to_string();
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, &params))
        .await
        .unwrap()
        .unwrap();
    let success = instance.finish(&not_launched()).await.unwrap().unwrap();
    let observed = observed(success.summary);
    assert_eq!(observed.len(), outside.len());
    for probe in &observed {
        assert_eq!(
            probe["read"]["ok"], false,
            "read outside the workspace: {probe}"
        );
        assert_eq!(
            probe["list"]["ok"], false,
            "listed outside the workspace: {probe}"
        );
    }
}

#[tokio::test]
async fn files_inside_the_workspace_can_be_read_and_written() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(7);
    std::fs::write(attempt.workspace().join("input.txt"), "hello from the host").unwrap();

    let params = r#"{"attack":"read-file","paths":["/workspace/input.txt","/workspace"]}"#;
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, params))
        .await
        .unwrap()
        .unwrap();
    let observed_reads = observed(
        instance
            .finish(&not_launched())
            .await
            .unwrap()
            .unwrap()
            .summary,
    );
    assert_eq!(
        observed_reads[0]["read"]["ok"], true,
        "{}",
        observed_reads[0]
    );
    assert_eq!(observed_reads[0]["read"]["head"], "hello from the host");
    assert_eq!(
        observed_reads[1]["list"]["ok"], true,
        "{}",
        observed_reads[1]
    );
    assert_eq!(
        observed_reads[1]["list"]["entries"],
        serde_json::json!(["input.txt"])
    );

    let params = r#"{"attack":"write-file","path":"/workspace/result.txt","contents":"written by the adapter"}"#;
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, params))
        .await
        .unwrap()
        .unwrap();
    let observed_write = observed(
        instance
            .finish(&not_launched())
            .await
            .unwrap()
            .unwrap()
            .summary,
    );
    assert_eq!(
        observed_write[0]["write"]["ok"], true,
        "{}",
        observed_write[0]
    );
    assert_eq!(observed_write[1]["read"]["head"], "written by the adapter");
    assert_eq!(
        std::fs::read_to_string(attempt.workspace().join("result.txt")).unwrap(),
        "written by the adapter"
    );

    // Writing outside is refused and leaves nothing behind.
    let escape = attempt.root.path().join("escaped.txt");
    let params = r#"{"attack":"write-file","path":"/workspace/../escaped.txt"}"#;
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, params))
        .await
        .unwrap()
        .unwrap();
    let observed_escape = observed(
        instance
            .finish(&not_launched())
            .await
            .unwrap()
            .unwrap()
            .summary,
    );
    assert_eq!(
        observed_escape[0]["write"]["ok"], false,
        "{}",
        observed_escape[0]
    );
    assert!(!escape.exists());
}

#[tokio::test]
async fn a_symlink_planted_by_the_trainer_does_not_lead_outside() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(8);
    std::fs::write(attempt.root.path().join("secret.txt"), "do-not-leak").unwrap();
    let params = r#"{"attack":"read-symlink","targets":["/etc/passwd","../secret.txt"]}"#;
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    let plan = instance
        .prepare(&task(&attempt, params))
        .await
        .unwrap()
        .unwrap();

    // Run the planned program the way the host would: directly, in the workspace.
    let command = plan::validate(plan, &python_allowlist())
        .unwrap()
        .command
        .expect("a command");
    let status = std::process::Command::new(&command.executable)
        .args(&command.args)
        .current_dir(attempt.workspace())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .status()
        .expect("run python3");
    assert!(status.success());
    for link in ["leak-0", "leak-1"] {
        let meta = std::fs::symlink_metadata(attempt.workspace().join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} was planted");
    }

    let exit = ExitReport {
        status: ExitStatus::Exited(0),
        stderr_tail: String::new(),
        duration_ms: 10,
    };
    let observed = observed(instance.finish(&exit).await.unwrap().unwrap().summary);
    assert_eq!(observed.len(), 2);
    for probe in &observed {
        assert_eq!(
            probe["read"]["ok"], false,
            "read through a symlink: {probe}"
        );
    }
}

#[tokio::test]
async fn the_sandbox_has_no_environment_arguments_or_network() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let attempt = Attempt::new(9);
    let params = serde_json::json!({"attack": "probe", "tcp": [address, "1.1.1.1:53"]}).to_string();
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, &params))
        .await
        .unwrap()
        .unwrap();
    let observed = observed(
        instance
            .finish(&not_launched())
            .await
            .unwrap()
            .unwrap()
            .summary,
    );
    let probe = &observed[0];
    assert_eq!(probe["env"], serde_json::json!([]), "{probe}");
    assert_eq!(probe["args"], serde_json::json!([]), "{probe}");
    for connect in probe["tcp"].as_array().unwrap() {
        assert_eq!(connect["connect"]["ok"], false, "{connect}");
    }
    assert_eq!(probe["lookup"]["ok"], false, "{probe}");
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "nothing connected to the host's socket"
    );
}

// ---------------------------------------------------------------------------
// The launch-plan policy

#[tokio::test]
async fn programs_off_the_allowlist_are_refused_whatever_their_spelling() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let allowlist = python_allowlist();
    for program in [
        "sh",
        "/bin/sh",
        "/usr/bin/python3",
        "curl",
        "python3.12",
        "../python3",
    ] {
        let params =
            serde_json::json!({"attack": "launch", "program": program, "args": ["-c", "id"]})
                .to_string();
        let plan = hostile_plan(&hostile, &params).await;
        let refused = plan::validate(plan, &allowlist).unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("adapter asked to launch {program:?}, which is not on its allowlist [python3]")
        );
    }
    let allowed = hostile_plan(
        &hostile,
        r#"{"attack":"launch","program":"python3","args":["-V"]}"#,
    )
    .await;
    assert!(plan::validate(allowed, &allowlist).is_ok());
}

#[tokio::test]
async fn launch_plans_over_the_limits_are_refused() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let allowlist = python_allowlist();
    type Expected = fn(&PlanError) -> bool;
    let cases: [(&str, Expected); 8] = [
        ("args", |e| {
            matches!(e, PlanError::TooManyArgs { count: 10_000 })
        }),
        ("arg-bytes", |e| matches!(e, PlanError::ArgsTooLarge { .. })),
        ("files", |e| {
            matches!(e, PlanError::TooManyFiles { count: 100 })
        }),
        ("env", |e| matches!(e, PlanError::TooManyEnv { count: 300 })),
        ("env-name", |e| matches!(e, PlanError::BadEnvName { .. })),
        ("nul", |e| matches!(e, PlanError::Nul { .. })),
        ("parent-path", |e| {
            matches!(e, PlanError::BadFilePath { .. })
        }),
        ("absolute-path", |e| {
            matches!(e, PlanError::BadFilePath { .. })
        }),
    ];
    for (shape, expected) in cases {
        let plan = hostile_plan(
            &hostile,
            &format!(r#"{{"attack":"huge-plan","shape":"{shape}"}}"#),
        )
        .await;
        let refused = plan::validate(plan, &allowlist).expect_err(shape);
        assert!(expected(&refused), "{shape}: {refused:?}");
    }

    // 20 MiB of files cannot even be built under a 16 MiB memory limit...
    let attempt = Attempt::new(10);
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    let fault = instance
        .prepare(&task(
            &attempt,
            r#"{"attack":"huge-plan","shape":"file-bytes"}"#,
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(fault, AdapterFault::MemoryLimit { .. }),
        "{fault:?}"
    );
    // ...and with room to build it, the policy refuses it.
    let roomy = AdapterRuntime::new(RuntimeConfig {
        memory_limit: 64 << 20,
        ..fast_config()
    })
    .unwrap();
    let hostile = load(&roomy, "hostile").await;
    let plan = hostile_plan(&hostile, r#"{"attack":"huge-plan","shape":"file-bytes"}"#).await;
    let refused = plan::validate(plan, &allowlist).unwrap_err();
    assert_eq!(refused, PlanError::FilesTooLarge { bytes: 20 << 20 });
}

// ---------------------------------------------------------------------------
// Floods and oversized values

#[tokio::test]
async fn a_log_flood_is_cut_to_the_attempt_budget() {
    let (events, _guard) = capture::adapter_events();
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    events.reset();
    let attempt = Attempt::new(11);
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    within(
        "log-flood",
        instance.prepare(&task(
            &attempt,
            r#"{"attack":"log-flood","records":100000}"#,
        )),
    )
    .await
    .expect("no fault")
    .expect("a plan");
    let (info, warn) = events.counts();
    assert_eq!(info, 1000, "records past the budget of 1000 are dropped");
    assert_eq!(warn, 1, "the exhausted budget is announced once");
    run_benign(&hostile).await;
}

#[tokio::test]
async fn progress_at_the_bounds_is_accepted_and_over_them_fails_the_attempt() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(12);
    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, r#"{"attack":"progress-flood"}"#))
        .await
        .unwrap()
        .unwrap();
    let lines = within("progress-flood", async {
        let mut events = 0;
        for i in 0..2000 {
            let event = instance
                .on_output(&format!("line {i}"))
                .await
                .expect("no fault");
            let event = event.expect("progress for every line");
            assert_eq!(event.progress.metrics.len(), 64);
            assert_eq!(event.progress.message.as_deref().map(str::len), Some(1024));
            events += 1;
        }
        events
    })
    .await;
    assert_eq!(lines, 2000);

    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(
            &attempt,
            r#"{"attack":"progress-flood","over":true}"#,
        ))
        .await
        .unwrap()
        .unwrap();
    let fault = instance.on_output("line").await.unwrap_err();
    assert_eq!(
        fault.to_string(),
        r#"adapter "hostile" returned an oversized result: 65 metrics (limit 64) in on-output"#
    );
    assert_eq!(
        instance.on_output("next").await.unwrap_err(),
        fault,
        "the instance is dead"
    );
    run_benign(&hostile).await;
}

#[tokio::test]
async fn huge_results_fail_the_attempt_and_huge_errors_are_cut() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let attempt = Attempt::new(13);

    let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
    instance
        .prepare(&task(&attempt, r#"{"attack":"huge-result"}"#))
        .await
        .unwrap()
        .unwrap();
    let fault = instance.finish(&not_launched()).await.unwrap_err();
    assert_eq!(
        fault.to_string(),
        r#"adapter "hostile" returned an oversized result: 1000 metrics (limit 256) in finish"#
    );

    for (params, call) in [
        (r#"{"attack":"huge-error"}"#, Call::Prepare),
        (r#"{"attack":"huge-error","in":"finish"}"#, Call::Finish),
    ] {
        let mut instance = hostile.instantiate(attempt.context.clone()).await.unwrap();
        let failure = match call {
            Call::Prepare => instance
                .prepare(&task(&attempt, params))
                .await
                .unwrap()
                .unwrap_err(),
            _ => {
                instance
                    .prepare(&task(&attempt, params))
                    .await
                    .unwrap()
                    .unwrap();
                instance.finish(&not_launched()).await.unwrap().unwrap_err()
            }
        };
        assert!(
            failure.message.starts_with("hostile huge error: eee"),
            "{call}"
        );
        assert!(
            failure.message.len() <= 4096,
            "{call}: {} bytes",
            failure.message.len()
        );
        assert!(failure.message.ends_with('…'));
        assert!(failure.retryable);
    }
    run_benign(&hostile).await;
}

// ---------------------------------------------------------------------------
// Loading

#[tokio::test]
async fn files_that_are_not_adapters_of_this_contract_are_refused_at_load() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let noop = std::fs::read(component("noop")).unwrap();

    let err = runtime
        .load(&write("random.wasm", &random))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err}");
    assert!(
        err.to_string()
            .ends_with("random.wasm is not a WebAssembly file"),
        "{err}"
    );

    let err = runtime
        .load(&write("core.wasm", b"\0asm\x01\0\0\0"))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::NotComponent { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("is a core WebAssembly module, not a component"),
        "{err}"
    );

    let err = runtime
        .load(&write("truncated.wasm", &noop[..noop.len() / 2]))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Corrupt { .. }), "{err}");

    let err = runtime
        .load(&dir.path().join("missing.wasm"))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Io { .. }), "{err}");

    let wrong = component("wrong-version");
    let err = runtime.load(&wrong).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "adapter {} targets trainyard:adapter@0.2.0; this host supports trainyard:adapter@0.1.x",
            wrong.display()
        )
    );

    let err = within(
        "hostile-describe",
        runtime.load(&component("hostile-describe")),
    )
    .await
    .unwrap_err();
    let LoadError::Describe { fault, .. } = &err else {
        panic!("expected a describe fault, got {err}");
    };
    assert_eq!(
        fault.to_string(),
        r#"adapter "hostile-describe" exceeded its 500 ms deadline in describe"#
    );

    // None of that hurt the runtime.
    let hostile = load(&runtime, "hostile").await;
    run_benign(&hostile).await;
}

#[tokio::test]
async fn compiled_components_are_cached_and_a_corrupt_cache_is_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..fast_config()
    };
    let cached_files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(cache.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };

    let runtime = AdapterRuntime::new(config.clone()).unwrap();
    load(&runtime, "noop").await;
    let files = cached_files();
    assert_eq!(files.len(), 1, "one compiled component: {files:?}");
    let file = &files[0];
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let (wasm_hash, rest) = name.split_once('-').expect("<sha256>-<engine hash>.cwasm");
    assert_eq!(wasm_hash.len(), 64);
    assert!(rest.ends_with(".cwasm"));
    let compiled = std::fs::read(file).unwrap();
    // Writing the cache replaces the file (temp file + rename), so an
    // unchanged inode shows the file was read, not written again.
    let inode = |path: &std::path::Path| std::fs::metadata(path).unwrap().ino();
    let first_inode = inode(file);

    // A second runtime (a restart) loads from the file and leaves it as is.
    let restarted = AdapterRuntime::new(config.clone()).unwrap();
    let noop = load(&restarted, "noop").await;
    assert_eq!(cached_files(), files);
    assert_eq!(
        inode(file),
        first_inode,
        "the cached file was used, not rewritten"
    );
    assert_eq!(std::fs::read(file).unwrap(), compiled);
    assert_eq!(noop.info().name, "noop");

    // The same runtime keeps what it loaded in memory: no file is read.
    std::fs::write(file, b"not a compiled component").unwrap();
    let again = load(&restarted, "noop").await;
    assert_eq!(again.info().name, "noop");
    assert_eq!(std::fs::read(file).unwrap(), b"not a compiled component");

    // Another restart finds the corrupt file, compiles again and replaces it.
    let restarted = AdapterRuntime::new(config.clone()).unwrap();
    let noop = load(&restarted, "noop").await;
    let attempt = Attempt::new(14);
    let mut instance = noop.instantiate(attempt.context.clone()).await.unwrap();
    assert!(instance
        .prepare(&task(&attempt, "{}"))
        .await
        .unwrap()
        .is_ok());
    assert_eq!(cached_files(), files);
    assert_ne!(inode(file), first_inode, "the corrupt file was replaced");
    assert_eq!(std::fs::read(file).unwrap(), compiled);
}

// ---------------------------------------------------------------------------
// Capacity

#[tokio::test]
async fn an_attempt_waits_for_a_free_adapter_instance_and_a_long_wait_is_retryable() {
    let runtime = AdapterRuntime::new(RuntimeConfig {
        max_instances: 2,
        ..fast_config()
    })
    .unwrap();
    let noop = load(&runtime, "noop").await;
    let attempt = Attempt::new(15);
    let first = noop.instantiate(attempt.context.clone()).await.unwrap();
    let second = noop.instantiate(attempt.context.clone()).await.unwrap();

    // Every instance stays taken past the call deadline: the attempt fails,
    // saying the host was busy, and may be retried.
    let fault = noop
        .instantiate(attempt.context.clone())
        .await
        .expect_err("the pool stayed full");
    assert!(
        matches!(fault, AdapterFault::NoInstance { capacity: 2, .. }),
        "{fault:?}"
    );
    assert!(fault.retryable(), "a busy host is not the task's fault");
    assert!(
        fault.to_string().contains("host.adapter_instances"),
        "{fault}"
    );

    // An attempt that finds the pool full waits for an instance to come back.
    let waiting = tokio::spawn({
        let noop = noop.clone();
        let context = attempt.context.clone();
        async move { noop.instantiate(context).await.map(|_| ()) }
    });
    drop(first);
    waiting
        .await
        .unwrap()
        .expect("the waiting attempt got the instance given back");
    drop(second);
    let mut third = noop.instantiate(attempt.context.clone()).await.unwrap();
    assert!(third.prepare(&task(&attempt, "{}")).await.unwrap().is_ok());
}

#[test]
fn the_runtime_types_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<AdapterRuntime>();
    send_sync::<trainyard_host::runtime::LoadedAdapter>();
    send::<trainyard_host::runtime::AdapterInstance>();
}

/// A guest spinning in a call yields to the executor at every epoch tick,
/// so other attempts on the same (single) thread keep running meanwhile.
#[tokio::test(flavor = "current_thread")]
async fn a_busy_guest_does_not_hold_the_thread_its_call_runs_on() {
    let runtime = runtime();
    let hostile = load(&runtime, "hostile").await;
    let noop = load(&runtime, "noop").await;
    let spinning = Attempt::new(17);
    let mut spinner = hostile.instantiate(spinning.context.clone()).await.unwrap();
    let finished = std::sync::Mutex::new(Vec::new());
    let spin = async {
        let fault = spinner
            .prepare(&task(&spinning, r#"{"attack":"loop-prepare"}"#))
            .await
            .unwrap_err();
        finished.lock().unwrap().push("spinner");
        fault
    };
    let others = async {
        // Let the spinner start first.
        tokio::task::yield_now().await;
        for i in 0..20 {
            let attempt = Attempt::new(100 + i);
            let mut instance = noop.instantiate(attempt.context.clone()).await.unwrap();
            instance
                .prepare(&task(&attempt, "{}"))
                .await
                .unwrap()
                .unwrap();
            instance.finish(&not_launched()).await.unwrap().unwrap();
        }
        finished.lock().unwrap().push("others");
    };
    let (fault, ()) = within("loop-prepare", async { tokio::join!(spin, others) }).await;
    assert!(matches!(fault, AdapterFault::Deadline { .. }), "{fault:?}");
    assert_eq!(*finished.lock().unwrap(), ["others", "spinner"]);
}

/// Counting the adapter's log events, through a `tracing` subscriber set for
/// the test's thread only (each `#[tokio::test]` runs on its own thread).
mod capture {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tracing::{Level, Subscriber};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    #[derive(Clone, Default)]
    pub struct Counts {
        info: Arc<AtomicUsize>,
        warn: Arc<AtomicUsize>,
    }

    impl Counts {
        pub fn counts(&self) -> (usize, usize) {
            (
                self.info.load(Ordering::SeqCst),
                self.warn.load(Ordering::SeqCst),
            )
        }

        pub fn reset(&self) {
            self.info.store(0, Ordering::SeqCst);
            self.warn.store(0, Ordering::SeqCst);
        }
    }

    impl<S: Subscriber> Layer<S> for Counts {
        fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
            let meta = event.metadata();
            if meta.target() != "trainyard::adapter" {
                return;
            }
            match *meta.level() {
                Level::INFO => self.info.fetch_add(1, Ordering::SeqCst),
                Level::WARN => self.warn.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
        }
    }

    pub fn adapter_events() -> (Counts, tracing::subscriber::DefaultGuard) {
        let counts = Counts::default();
        let subscriber = tracing_subscriber::registry().with(counts.clone());
        (counts, tracing::subscriber::set_default(subscriber))
    }
}
