//! `trainyard submit`: builds a task (or a batch of copies with successive
//! seeds) from the flags, submits it, prints the ids, and with `--wait`
//! follows the tasks until they end.

use super::follow::{self, Following, Watched};
use super::table::{render_final_table, FinalRow};
use crate::client::ApiClient;
use anyhow::bail;
use serde_json::{json, Map, Value};

/// Most copies one `--count` submits (the master's batch limit).
const MAX_COUNT: u32 = 10_000;

#[derive(Debug, Clone, clap::Args)]
pub struct SubmitArgs {
    /// The adapter that runs the task, as the hosts name it (e.g. python-trainer),
    /// optionally pinned to versions: NAME@REQUIREMENT (e.g. ppo@=1.2.0, ppo@^1.2)
    #[arg(long, value_name = "NAME[@VERSION]")]
    pub adapter: String,
    /// One of the adapter's task kinds [default: the adapter's first]
    #[arg(long)]
    pub kind: Option<String>,
    /// Task parameters as a JSON object, handed to the adapter as is, e.g. '{"episodes": 300}'
    #[arg(long, value_name = "JSON", value_parser = parse_params)]
    pub params: Option<Map<String, Value>>,
    /// One parameter, KEY=VALUE; repeatable, and wins over --params
    ///
    /// VALUE is read as JSON when it is JSON (300, 0.5, true, [1,2], {"a":1}, "quoted"), else
    /// taken as a string.
    #[arg(long = "param", value_name = "KEY=VALUE", value_parser = parse_param)]
    pub param: Vec<(String, Value)>,
    /// Higher runs first; equal priorities run in submission order [default: 0]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Runs started on a host before the task fails for good [default: the master's master.default_max_attempts]
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Wall-clock limit of each run of the trainer, in seconds
    #[arg(long = "timeout", value_name = "SECS")]
    pub timeout_secs: Option<u64>,
    /// A name to recognise the task by (every copy of a --count gets the same name)
    #[arg(long)]
    pub name: Option<String>,
    /// CPUs the task needs on its host (fractions allowed, e.g. 0.5)
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Memory the task needs on its host: bytes, or with a unit (512MiB, 4GiB)
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory: Option<u64>,
    /// GPUs the task needs on one host (whole devices, never shared)
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// Submit N copies in one batch (all accepted or none)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_COUNT as i64))]
    pub count: u32,
    /// Set params.seed to K in the first copy, K+1 in the second, ... (wins over --param seed=...)
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub seed_from: Option<i64>,
    /// Follow the tasks until every one has ended, printing their progress; exit non-zero
    /// unless all COMPLETED
    #[arg(long)]
    pub wait: bool,
}

/// `--memory`: bytes or an amount with a unit.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    trainyard_proto::resources::parse_memory(text).map_err(|e| e.to_string())
}

/// `--params`: a JSON object.
pub fn parse_params(text: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "must be a JSON object like '{{\"episodes\": 300}}', got {other}"
        )),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
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

/// The task documents to submit: `--params` with each `--param` over it,
/// `--count` copies, the seeds from `--seed-from`.
pub fn build_tasks(args: &SubmitArgs) -> Vec<Value> {
    let mut params = args.params.clone().unwrap_or_default();
    for (key, value) in &args.param {
        params.insert(key.clone(), value.clone());
    }
    (0..args.count)
        .map(|i| {
            let mut params = params.clone();
            if let Some(first) = args.seed_from {
                params.insert("seed".into(), json!(first.saturating_add(i64::from(i))));
            }
            let mut task = Map::new();
            task.insert("adapter".into(), json!(args.adapter));
            task.insert("params".into(), Value::Object(params));
            let optional = [
                ("kind", args.kind.as_ref().map(|k| json!(k))),
                ("priority", args.priority.map(|p| json!(p))),
                ("max_attempts", args.max_attempts.map(|m| json!(m))),
                ("timeout_secs", args.timeout_secs.map(|t| json!(t))),
                ("name", args.name.as_ref().map(|n| json!(n))),
            ];
            for (field, value) in optional {
                if let Some(value) = value {
                    task.insert(field.into(), value);
                }
            }
            if let Some(resources) = resources(args) {
                task.insert("resources".into(), resources);
            }
            Value::Object(task)
        })
        .collect()
}

/// `--cpus`, `--memory` and `--gpus` as the API's `resources`, if any was given.
fn resources(args: &SubmitArgs) -> Option<Value> {
    let mut resources = Map::new();
    if let Some(cpus) = args.cpus {
        resources.insert("cpus".into(), json!(cpus));
    }
    if let Some(memory) = args.memory {
        resources.insert("memory".into(), json!(memory));
    }
    if let Some(gpus) = args.gpus {
        resources.insert("gpus".into(), json!(gpus));
    }
    (!resources.is_empty()).then_some(Value::Object(resources))
}

pub async fn run(client: &ApiClient, args: SubmitArgs) -> anyhow::Result<()> {
    let tasks = build_tasks(&args);
    // Listen before submitting, so not even the first dispatch is missed.
    let stream = match args.wait {
        true => Some(follow::open(client, None).await?),
        false => None,
    };
    let ids = match tasks.as_slice() {
        [one] => vec![client.submit(one).await?],
        many => client.submit_batch(many).await?,
    };
    for id in &ids {
        println!("{id}");
    }
    if !args.wait {
        return Ok(());
    }

    let mut watched = Watched::only(&ids);
    let how = Following {
        until_done: true,
        ..Following::default()
    };
    follow::follow(client, &mut watched, &how, stream, &mut |line| {
        println!("{line}")
    })
    .await?;

    let mut rows = vec![];
    for id in &ids {
        rows.push(FinalRow::from_task(&client.task(*id).await?.task));
    }
    println!("\n{}", render_final_table(&rows));
    if let Some(shortfall) = watched.shortfall() {
        bail!(shortfall);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        submit: SubmitArgs,
    }

    fn args(flags: &[&str]) -> Result<SubmitArgs, clap::Error> {
        let argv = std::iter::once("submit").chain(flags.iter().copied());
        Cli::try_parse_from(argv).map(|c| c.submit)
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
    fn params_must_be_an_object() {
        assert!(parse_params("[1, 2]")
            .unwrap_err()
            .contains("must be a JSON object"));
        assert!(parse_params("{oops")
            .unwrap_err()
            .starts_with("not valid JSON"));
        assert_eq!(
            parse_params(r#"{"a": 1}"#).unwrap().get("a"),
            Some(&json!(1))
        );
    }

    #[test]
    fn params_flags_merge_over_the_json_object() {
        let a = args(&[
            "--adapter",
            "python-trainer",
            "--params",
            r#"{"episodes": 100, "lr": 0.1}"#,
            "--param",
            "episodes=300",
            "--param",
            "env=grid",
            "--priority",
            "-2",
            "--timeout",
            "600",
        ])
        .unwrap();
        let tasks = build_tasks(&a);
        assert_eq!(
            tasks,
            vec![json!({
                "adapter": "python-trainer",
                "params": {"episodes": 300, "lr": 0.1, "env": "grid"},
                "priority": -2,
                "timeout_secs": 600,
            })]
        );
    }

    #[test]
    fn count_makes_copies_with_successive_seeds() {
        let a = args(&[
            "--adapter",
            "a",
            "--param",
            "seed=99",
            "--count",
            "3",
            "--seed-from",
            "10",
            "--name",
            "sweep",
        ])
        .unwrap();
        let tasks = build_tasks(&a);
        let seeds: Vec<&Value> = tasks.iter().map(|t| &t["params"]["seed"]).collect();
        assert_eq!(seeds, [&json!(10), &json!(11), &json!(12)]);
        assert!(tasks.iter().all(|t| t["name"] == "sweep"));

        let plain = build_tasks(&args(&["--adapter", "a", "--count", "2"]).unwrap());
        assert_eq!(plain, vec![json!({"adapter": "a", "params": {}}); 2]);
    }

    #[test]
    fn resource_flags_become_the_tasks_request() {
        let a = args(&[
            "--adapter",
            "a",
            "--cpus",
            "2",
            "--memory",
            "4GiB",
            "--gpus",
            "1",
        ])
        .unwrap();
        assert_eq!(
            build_tasks(&a)[0]["resources"],
            json!({"cpus": 2.0, "memory": 4u64 << 30, "gpus": 1})
        );
        let plain = build_tasks(&args(&["--adapter", "a"]).unwrap());
        assert!(plain[0].get("resources").is_none());
        let e = args(&["--adapter", "a", "--memory", "lots"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("lots"), "{e}");
    }

    #[test]
    fn bad_flags_are_refused_before_anything_is_sent() {
        assert!(args(&["--params", "{}"]).is_err(), "--adapter is required");
        assert!(args(&["--adapter", "a", "--count", "0"]).is_err());
        let e = args(&["--adapter", "a", "--params", "[1]"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be a JSON object"), "{e}");
    }
}
