//! Values at and over the contract's bounds: launch plans, progress and
//! results the host must refuse (or, for progress at the bounds, accept).

use crate::attack::PlanShape;
use crate::bindings::trainyard::adapter::types::{
    Command, EnvVar, LaunchPlan, Metric, Progress, TaskResult, WorkspaceFile,
};

const MIB: usize = 1 << 20;

/// A launch plan breaking one of the limits of `launch-plan`.
pub fn plan(shape: PlanShape) -> LaunchPlan {
    let mut files = Vec::new();
    let mut args = Vec::new();
    let mut env = Vec::new();
    match shape {
        PlanShape::Args => args = (0..10_000).map(|i| format!("arg-{i}")).collect(),
        PlanShape::ArgBytes => args = vec!["a".repeat(600 << 10), "b".repeat(600 << 10)],
        PlanShape::Files => {
            files = (0..100)
                .map(|i| file(&format!("file-{i}.txt"), 16))
                .collect()
        }
        PlanShape::FileBytes => {
            files = vec![file("big-0.bin", 10 * MIB), file("big-1.bin", 10 * MIB)]
        }
        PlanShape::Env => env = (0..300).map(|i| var(&format!("VAR_{i}"), "x")).collect(),
        PlanShape::EnvName => env = vec![var("1BAD=X", "x")],
        PlanShape::Nul => args = vec!["before\0after".to_owned()],
        PlanShape::ParentPath => files = vec![file("../escape.txt", 16)],
        PlanShape::AbsolutePath => files = vec![file("/tmp/hostile-escape.txt", 16)],
    }
    LaunchPlan {
        files,
        command: Some(Command {
            program: "python3".to_owned(),
            args,
            env,
        }),
    }
}

/// Progress for one output line with every field as large as allowed: 64
/// metrics named with 128 bytes, a 1 KiB message. `over` adds a 65th metric.
pub fn progress(line: &str, over: bool) -> Progress {
    let count = if over { 65 } else { 64 };
    let metrics = (0..count)
        .map(|i| Metric {
            name: format!("{i:0>128}"),
            value: line.len() as f64,
        })
        .collect();
    Progress {
        episode: Some(line.len() as u64 + 1),
        total_episodes: None,
        episode_return: Some(0.0),
        metrics,
        checkpoint: None,
        message: Some("m".repeat(1024)),
    }
}

/// 1,000 metrics (limit 256) and a 1 MiB summary (limit 4 KiB).
pub fn result() -> TaskResult {
    TaskResult {
        metrics: (0..1000)
            .map(|i| Metric {
                name: format!("metric-{i}"),
                value: f64::from(i),
            })
            .collect(),
        checkpoint: None,
        summary: Some("s".repeat(MIB)),
    }
}

/// A 1 MiB error message (limit 4 KiB), starting with a recognisable line.
pub fn error_message() -> String {
    let mut message = String::from("hostile huge error: ");
    message.push_str(&"e".repeat(MIB));
    message
}

fn file(path: &str, size: usize) -> WorkspaceFile {
    WorkspaceFile {
        path: path.to_owned(),
        contents: vec![b'x'; size],
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}
