//! The `hostile` task adapter: misbehaves on request, so tests can prove
//! that the host's sandbox holds and that the host keeps serving afterwards.
//!
//! A task's params pick the attack (see [`attack`]): endless loops in any
//! call, a memory bomb, traps and panics, reads outside the workspace
//! (directly or through a symlink a launched program plants), forbidden
//! programs, launch plans and results over the contract's bounds, floods of
//! logs and progress. `{}` behaves: a plan that runs nothing and a `finish`
//! that succeeds. What an attack managed to do is reported in the `finish`
//! summary as one line of JSON (see [`probe`]); `env-values` reports there
//! the resources the host says it assigned the attempt.
//!
//! Layout: [`attack`] reads the params, [`probe`] tries the sandbox,
//! [`oversized`] builds values over the bounds; this file is the glue.

mod attack;
mod oversized;
mod probe;

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "adapter-core",
    });
}

use attack::{Attack, Phase};
use bindings::exports::trainyard::adapter::adapter::Guest;
use bindings::trainyard::adapter::host::{assigned_resources, log, LogLevel};
use bindings::trainyard::adapter::types::{
    AdapterInfo, Command, EnvVar, ExitReport, LaunchPlan, Metric, Progress, Task, TaskError,
    TaskResult,
};
use serde_json::{json, Value};
use std::sync::Mutex;

/// The attack `prepare` chose, for `on-output` and `finish`, and what
/// `prepare` already observed. One instance serves one attempt and is never
/// called concurrently.
static ATTEMPT: Mutex<Option<(Attack, Vec<Value>)>> = Mutex::new(None);

fn remember(attack: Attack, observed: Vec<Value>) {
    *ATTEMPT.lock().unwrap_or_else(|p| p.into_inner()) = Some((attack, observed));
}

fn recall() -> (Attack, Vec<Value>) {
    ATTEMPT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or((Attack::None, Vec::new()))
}

struct Hostile;

impl Guest for Hostile {
    fn describe() -> AdapterInfo {
        AdapterInfo {
            name: "hostile".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            description: "Misbehaves on request, for proving the host's sandbox".to_owned(),
            kinds: vec!["attack".to_owned()],
        }
    }

    fn prepare(task: Task) -> Result<LaunchPlan, TaskError> {
        let attack = attack::parse(&task.params).map_err(|message| TaskError {
            message: format!("invalid params: {message}"),
            retryable: false,
        })?;
        let mut observed = Vec::new();
        let plan = match &attack {
            Attack::Loop(Phase::Prepare) => spin(),
            Attack::MemoryBomb => memory_bomb(),
            Attack::Trap => trap(),
            Attack::Panic => panic!("hostile adapter panics on purpose"),
            Attack::StackOverflow => {
                recurse(0);
                idle_plan()
            }
            Attack::Exit => std::process::exit(3),
            Attack::Sleep => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                idle_plan()
            }
            Attack::WriteFile { path, contents } => {
                observed.push(probe::write(path, contents));
                idle_plan()
            }
            Attack::ReadSymlink { program, targets } => symlink_plan(program, targets),
            Attack::Launch { program, args } => LaunchPlan {
                files: Vec::new(),
                command: Some(Command {
                    program: program.clone(),
                    args: args.clone(),
                    env: Vec::new(),
                }),
            },
            Attack::HugePlan(shape) => oversized::plan(*shape),
            // Output attacks need output: a trainer that prints lines.
            Attack::Loop(Phase::Output) | Attack::ProgressFlood { .. } => {
                python("for i in range(100): print(i, flush=True)")
            }
            Attack::DumpEnv => python(
                "import os, json; open('env.json', 'w').write(json.dumps(sorted(os.environ)))",
            ),
            Attack::EnvValues { names, hold_secs } => {
                observed.push(assigned());
                python(&format!(
                    // A JSON list of strings is also a Python list literal.
                    "import os, json, time; \
                     print(json.dumps({{n: os.environ.get(n) for n in {}}}), flush=True); \
                     time.sleep({hold_secs})",
                    Value::from(names.clone())
                ))
            }
            Attack::LogFlood { records } => {
                for i in 0..*records {
                    log(LogLevel::Info, &format!("hostile log flood, record {i}"));
                }
                idle_plan()
            }
            Attack::HugeError(Phase::Prepare) => {
                return Err(TaskError {
                    message: oversized::error_message(),
                    retryable: true,
                })
            }
            _ => idle_plan(),
        };
        remember(attack, observed);
        Ok(plan)
    }

    fn on_output(line: String) -> Option<Progress> {
        match recall().0 {
            Attack::Loop(Phase::Output) => spin(),
            Attack::ProgressFlood { over } => Some(oversized::progress(&line, over)),
            Attack::EnvValues { .. } => Some(Progress {
                episode: None,
                total_episodes: None,
                episode_return: None,
                metrics: Vec::new(),
                checkpoint: None,
                message: Some(line),
            }),
            _ => None,
        }
    }

    fn finish(_exit: ExitReport) -> Result<TaskResult, TaskError> {
        let (attack, mut observed) = recall();
        match attack {
            Attack::Loop(Phase::Finish) => spin(),
            Attack::HugeResult => return Ok(oversized::result()),
            Attack::HugeError(Phase::Finish) => {
                return Err(TaskError {
                    message: oversized::error_message(),
                    retryable: true,
                })
            }
            Attack::ReadFile { paths } => observed.extend(paths.iter().map(|p| probe::read(p))),
            Attack::WriteFile { path, .. } => observed.push(probe::read(&path)),
            Attack::ReadSymlink { targets, .. } => observed
                .extend((0..targets.len()).map(|i| probe::read(&format!("/workspace/leak-{i}")))),
            Attack::Probe { tcp } => observed.push(probe::environment(&tcp)),
            Attack::DumpEnv => {
                observed.push(match std::fs::read_to_string("/workspace/env.json") {
                    Ok(text) => serde_json::from_str(&text).unwrap_or(Value::Null),
                    Err(e) => json!({ "error": e.to_string() }),
                })
            }
            _ => {}
        }
        Ok(TaskResult {
            metrics: vec![Metric {
                name: "ok".to_owned(),
                value: 1.0,
            }],
            checkpoint: None,
            summary: Some(json!({ "observed": observed }).to_string()),
        })
    }
}

/// What the host says it gave this attempt, as the summary reports it.
fn assigned() -> Value {
    let given = assigned_resources();
    json!({ "assigned": {
        "gpus": given.gpus,
        "cpus": given.cpus,
        "memory_bytes": given.memory_bytes,
    }})
}

/// A plan running `python3 -c <code>`.
fn python(code: &str) -> LaunchPlan {
    LaunchPlan {
        files: Vec::new(),
        command: Some(Command {
            program: "python3".to_owned(),
            args: vec!["-c".to_owned(), code.to_owned()],
            env: vec![EnvVar {
                name: "SET_BY_ADAPTER".to_owned(),
                value: "1".to_owned(),
            }],
        }),
    }
}

fn idle_plan() -> LaunchPlan {
    LaunchPlan {
        files: Vec::new(),
        command: None,
    }
}

/// A plan whose program plants `leak-<i>` pointing at each target, in the
/// workspace (the program's working directory).
fn symlink_plan(program: &str, targets: &[String]) -> LaunchPlan {
    let links: Vec<String> = targets
        .iter()
        .enumerate()
        // A JSON string literal is also a valid Python string literal.
        .map(|(i, target)| format!("os.symlink({}, 'leak-{i}')", Value::from(target.as_str())))
        .collect();
    LaunchPlan {
        files: Vec::new(),
        command: Some(Command {
            program: program.to_owned(),
            args: vec!["-c".to_owned(), format!("import os; {}", links.join("; "))],
            env: Vec::new(),
        }),
    }
}

fn spin() -> ! {
    let mut spins: u64 = 0;
    loop {
        // `black_box` keeps the optimiser from proving the loop useless.
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
}

/// Allocates 1 MiB at a time and writes every page, keeping it all.
fn memory_bomb() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        for page in chunk.chunks_mut(4096) {
            page[0] = 1;
        }
        hoard.push(std::hint::black_box(chunk));
    }
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

/// Recurses until the stack runs out (the depth test only keeps the
/// compiler from seeing an unconditional recursion).
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 64]);
    if depth == u64::MAX {
        return 0;
    }
    recurse(depth + 1).wrapping_add(frame[(depth % 64) as usize])
}

bindings::export!(Hostile with_types_in bindings);
