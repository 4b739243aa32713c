//! `trainyard submit`: builds a task (or a batch of copies with successive
//! seeds) from the flags, submits it, prints the ids, and with `--wait`
//! follows the tasks until they end. The flags it shares with `sweep` are
//! defined once, in [`super::task_flags`].

use super::follow;
use super::table::{render_final_table, FinalRow};
use super::task_flags::TaskFlags;
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
    /// Task parameters as a JSON object, handed to the adapter as is, e.g. '{"episodes": 300}'
    #[arg(long, value_name = "JSON", value_parser = parse_params)]
    pub params: Option<Map<String, Value>>,
    /// Submit N copies in one batch (all accepted or none)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_COUNT as i64))]
    pub count: u32,
    #[command(flatten)]
    pub task: TaskFlags,
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

/// The task documents to submit: `--params` with each `--param` over it,
/// `--count` copies, the seeds from `--seed-from`.
pub fn build_tasks(args: &SubmitArgs) -> Vec<Value> {
    let flags = &args.task;
    let mut params = args.params.clone().unwrap_or_default();
    for (key, value) in &flags.param {
        params.insert(key.clone(), value.clone());
    }
    (0..args.count)
        .map(|i| {
            let mut params = params.clone();
            if let Some(first) = flags.seed_from {
                params.insert("seed".into(), json!(first.saturating_add(i64::from(i))));
            }
            let mut task = Map::new();
            task.insert("adapter".into(), json!(args.adapter));
            task.insert("params".into(), Value::Object(params));
            let optional = [
                ("kind", flags.kind.as_ref().map(|k| json!(k))),
                ("priority", flags.priority.map(|p| json!(p))),
                ("max_attempts", flags.max_attempts.map(|m| json!(m))),
                ("timeout_secs", flags.timeout_secs.map(|t| json!(t))),
                (
                    "progress_timeout_secs",
                    flags.progress_timeout_secs.map(|t| json!(t)),
                ),
                ("name", flags.name.as_ref().map(|n| json!(n))),
            ];
            for (field, value) in optional {
                if let Some(value) = value {
                    task.insert(field.into(), value);
                }
            }
            if let Some(resources) = flags.resources() {
                task.insert("resources".into(), resources);
            }
            Value::Object(task)
        })
        .collect()
}

pub async fn run(client: &ApiClient, args: SubmitArgs) -> anyhow::Result<()> {
    let tasks = build_tasks(&args);
    // Listen before submitting, so not even the first dispatch is missed.
    let stream = match args.task.wait {
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
    let Some(stream) = stream else {
        return Ok(());
    };
    let watched = follow::until_ended(client, &ids, stream).await?;
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
        let a = args(&["--adapter", "a", "--cpus", "2", "--gpus", "1"]).unwrap();
        assert_eq!(
            build_tasks(&a)[0]["resources"],
            json!({"cpus": 2.0, "gpus": 1})
        );
        let plain = build_tasks(&args(&["--adapter", "a"]).unwrap());
        assert!(plain[0].get("resources").is_none());
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
