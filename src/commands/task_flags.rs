//! The flags `submit` and `sweep` share, defined once: what a task asks of
//! the cluster besides its adapter (its kind, name, params, priority,
//! attempts, time limit, progress timeout, resources and first seed), and
//! `--wait`. `submit` applies them to each copy of a task, `sweep` to each
//! trial.

use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Default, clap::Args)]
pub struct TaskFlags {
    /// One of the adapter's task kinds [default: the adapter's first]
    #[arg(long)]
    pub kind: Option<String>,
    /// A name to recognise the tasks by (every copy gets it; a sweep and each of its trials)
    #[arg(long)]
    pub name: Option<String>,
    /// One parameter, KEY=VALUE; repeatable, and wins over --params (or the spec file)
    ///
    /// VALUE is read as JSON when it is JSON (300, 0.5, true, [1,2], {"a":1}, "quoted"), else
    /// taken as a string.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub param: Vec<(String, Value)>,
    /// Higher runs first; equal priorities run in submission order [default: 0]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Runs started on a host before a task fails for good [default: the master's master.default_max_attempts]
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Wall-clock limit of each run of the trainer, in seconds
    #[arg(long = "timeout", value_name = "SECS")]
    pub timeout_secs: Option<u64>,
    /// End a run as stalled when its trainer reports no progress for this many seconds
    /// (requeued from its last checkpoint) [default: the adapter's, on the host]
    #[arg(
        long = "progress-timeout",
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub progress_timeout_secs: Option<i64>,
    /// CPUs each task needs on its host (fractions allowed, e.g. 0.5)
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Memory each task needs on its host: bytes, or with a unit (512MiB, 4GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<u64>,
    /// GPUs each task needs on one host (whole devices, never shared)
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// The first seed: params.seed is K in the first copy (or a sweep's first
    /// seed), K+1 in the next, ... [default: a sweep's 0; a task's own params]
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub seed_from: Option<i64>,
    /// Follow the tasks until every one has ended, printing their progress, then their
    /// results; exit non-zero unless all completed (a sweep's trials stopped early count
    /// as completed)
    #[arg(long)]
    pub wait: bool,
}

impl TaskFlags {
    /// `--cpus`, `--memory` and `--gpus` as the API's `resources`, if any
    /// was given.
    pub fn resources(&self) -> Option<Value> {
        let mut resources = Map::new();
        if let Some(cpus) = self.cpus {
            resources.insert("cpus".into(), json!(cpus));
        }
        if let Some(memory) = self.memory {
            resources.insert("memory".into(), json!(memory));
        }
        if let Some(gpus) = self.gpus {
            resources.insert("gpus".into(), json!(gpus));
        }
        (!resources.is_empty()).then_some(Value::Object(resources))
    }
}

/// `--memory`: bytes or an amount with a unit.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    trainyard_proto::resources::parse_memory(text).map_err(|e| e.to_string())
}

/// `--param KEY=VALUE`: VALUE as JSON when it parses, else as a string.
pub fn parse_param(text: &str) -> Result<(String, Value), String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!("expected KEY=VALUE, got {text:?}"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("the key before '=' is empty in {text:?}"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((key.to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: TaskFlags,
    }

    fn flags(args: &[&str]) -> Result<TaskFlags, clap::Error> {
        Cli::try_parse_from(std::iter::once("cmd").chain(args.iter().copied())).map(|c| c.flags)
    }

    #[test]
    fn a_param_value_is_json_when_it_parses_and_a_string_otherwise() {
        assert_eq!(
            parse_param("episodes=300"),
            Ok(("episodes".into(), json!(300)))
        );
        assert_eq!(parse_param("lr=0.5"), Ok(("lr".into(), json!(0.5))));
        assert_eq!(
            parse_param("render=false"),
            Ok(("render".into(), json!(false)))
        );
        assert_eq!(
            parse_param("layers=[64,64]"),
            Ok(("layers".into(), json!([64, 64])))
        );
        assert_eq!(
            parse_param("env=CartPole-v1"),
            Ok(("env".into(), json!("CartPole-v1")))
        );
        assert_eq!(parse_param("tag=\"300\""), Ok(("tag".into(), json!("300"))));
        assert_eq!(
            parse_param("note=a=b"),
            Ok(("note".into(), json!("a=b"))),
            "split at the first '='"
        );
        assert_eq!(parse_param("empty="), Ok(("empty".into(), json!(""))));
        assert!(parse_param("episodes")
            .unwrap_err()
            .contains("expected KEY=VALUE"));
        assert!(parse_param("=3")
            .unwrap_err()
            .contains("key before '=' is empty"));
    }

    #[test]
    fn resource_flags_become_the_request() {
        let f = flags(&["--cpus", "2", "--memory", "4GiB", "--gpus", "1"]).unwrap();
        assert_eq!(
            f.resources(),
            Some(json!({"cpus": 2.0, "memory": 4u64 << 30, "gpus": 1}))
        );
        assert_eq!(flags(&[]).unwrap().resources(), None);
        let e = flags(&["--memory", "lots"]).unwrap_err().to_string();
        assert!(e.contains("lots"), "{e}");
    }
}
