//! `trainyard sweep`: creates a sweep from flags or a spec file (JSON or
//! TOML, flags over the file) and with `--wait` follows its trials to their
//! end (the flags it shares with `submit` are [`super::task_flags`]);
//! `trainyard sweep show ID` ranks its configurations over seeds and lists
//! its trials; `trainyard sweep cancel ID` cancels its unfinished trials.
//! `trainyard sweeps` lists them.

mod show;

pub use show::{counts, ranking_table, render_sweep, shortfall, trials_table};

use super::follow;
use super::task_flags::TaskFlags;
use crate::client::ApiClient;
use anyhow::{bail, Context};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use trainyard_master::search::spec::{scalar, Distribution};

#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SweepArgs {
    #[command(subcommand)]
    pub action: Option<SweepAction>,
    #[command(flatten)]
    pub create: CreateArgs,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum SweepAction {
    /// Rank a sweep's configurations by its metric over seeds, and list its trials
    Show {
        #[arg(value_name = "ID")]
        id: u64,
        /// Print the sweep (spec, ranking, trials) as JSON
        #[arg(long)]
        json: bool,
    },
    /// Cancel a sweep: its queued trials at once, its running ones on their hosts
    Cancel {
        #[arg(value_name = "ID")]
        id: u64,
    },
}

/// A sweep from flags, over the spec file if one is given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CreateArgs {
    /// A spec file, JSON or TOML (by its extension); flags add to it and win
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// The adapter that runs the trials (e.g. python-trainer)
    #[arg(long, value_name = "NAME")]
    pub adapter: Option<String>,
    /// Values to try, KEY=V1,V2,...; every combination of the grids is tried; repeatable
    #[arg(long, value_name = "KEY=V1,V2")]
    pub grid: Vec<String>,
    /// A random parameter, KEY=uniform:LOW:HIGH, KEY=log-uniform:LOW:HIGH or KEY=choice:A,B; repeatable
    #[arg(long, value_name = "KEY=DIST")]
    pub random: Vec<String>,
    /// Random draws per grid point [default: 1]
    #[arg(long, value_name = "N")]
    pub samples: Option<u32>,
    /// Trials per configuration, each with its own seed [default: 1]
    #[arg(long, value_name = "N")]
    pub seeds: Option<u32>,
    /// The parameter that carries a trial's seed [default: seed]
    #[arg(long, value_name = "NAME")]
    pub seed_param: Option<String>,
    /// Seed of the random draws, to repeat a search exactly [default: chosen by the master, shown by `sweep show`]
    #[arg(long, value_name = "N")]
    pub sweep_seed: Option<u64>,
    /// The result metric that ranks the configurations (e.g. mean_return)
    #[arg(long, value_name = "NAME")]
    pub metric: Option<String>,
    /// Higher is better (the default)
    #[arg(long, conflicts_with = "min")]
    pub max: bool,
    /// Lower is better
    #[arg(long)]
    pub min: bool,
    /// Stop the worse configurations at these episodes, e.g. 100,300,900 (successive halving)
    #[arg(long, value_name = "EPISODES", value_delimiter = ',')]
    pub stop_at: Vec<u64>,
    /// With --stop-at: the fraction of configurations kept at each milestone [default: 0.5]
    #[arg(long, value_name = "FRACTION", requires = "stop_at")]
    pub keep: Option<f64>,
    /// Print the master's answer as JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub trials: TaskFlags,
}

/// Reads a spec file: TOML for `.toml`, JSON otherwise.
pub fn read_spec_file(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the spec file {}", path.display()))?;
    let value: Value = if path.extension().is_some_and(|e| e == "toml") {
        let parsed: toml::Value = toml::from_str(&text)
            .with_context(|| format!("{} is not valid TOML", path.display()))?;
        serde_json::to_value(parsed)?
    } else {
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?
    };
    match value {
        Value::Object(map) => Ok(map),
        other => bail!(
            "{}: a spec is an object (a table), got {other}",
            path.display()
        ),
    }
}

fn key_value<'a>(flag: &str, text: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v)),
        _ => bail!("--{flag} {text:?}: expected KEY=VALUE"),
    }
}

/// Adds `entries` to the object at `spec[field]`.
fn merge(spec: &mut Map<String, Value>, field: &str, entries: Vec<(String, Value)>) {
    if entries.is_empty() {
        return;
    }
    let slot = spec
        .entry(field.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    if let Value::Object(map) = slot {
        map.extend(entries);
    }
}

impl CreateArgs {
    /// The spec the flags (over the file) describe, as the API takes it.
    pub fn spec(&self) -> anyhow::Result<Value> {
        let mut spec = match &self.file {
            Some(path) => read_spec_file(path)?,
            None => Map::new(),
        };
        let t = &self.trials;
        merge(&mut spec, "params", t.param.clone());
        let grid = self
            .grid
            .iter()
            .map(|g| {
                let (k, v) = key_value("grid", g)?;
                Ok((
                    k.to_string(),
                    Value::Array(v.split(',').map(scalar).collect()),
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        merge(&mut spec, "grid", grid);
        let random = self
            .random
            .iter()
            .map(|r| {
                let (k, v) = key_value("random", r)?;
                Distribution::parse(v).map_err(|e| anyhow::anyhow!("--random {k}: {e}"))?;
                Ok((k.to_string(), Value::String(v.to_string())))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        merge(&mut spec, "random", random);
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(v) = value {
                spec.insert(key.to_string(), v);
            }
        };
        set("adapter", self.adapter.clone().map(Value::from));
        set("kind", t.kind.clone().map(Value::from));
        set("name", t.name.clone().map(Value::from));
        set("samples", self.samples.map(Value::from));
        set("seeds", self.seeds.map(Value::from));
        set("seed_from", t.seed_from.map(Value::from));
        set("seed_param", self.seed_param.clone().map(Value::from));
        set("sweep_seed", self.sweep_seed.map(Value::from));
        set("metric", self.metric.clone().map(Value::from));
        set("priority", t.priority.map(Value::from));
        set("max_attempts", t.max_attempts.map(Value::from));
        set("timeout_secs", t.timeout_secs.map(Value::from));
        set(
            "progress_timeout_secs",
            t.progress_timeout_secs.map(Value::from),
        );
        if self.max || self.min {
            set(
                "direction",
                Some(Value::from(if self.min { "min" } else { "max" })),
            );
        }
        if !self.stop_at.is_empty() {
            let mut es = serde_json::json!({ "milestones": self.stop_at });
            if let Some(keep) = self.keep {
                es["keep"] = Value::from(keep);
            }
            set("early_stopping", Some(es));
        }
        set("resources", t.resources());
        for required in ["adapter", "metric"] {
            if !spec.contains_key(required) {
                bail!("a sweep needs --{required} (or \"{required}\" in --file)");
            }
        }
        Ok(Value::Object(spec))
    }
}

pub async fn run(client: &ApiClient, args: SweepArgs) -> anyhow::Result<()> {
    match args.action {
        Some(SweepAction::Show { id, json }) => {
            let sweep = client.sweep(id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&sweep)?);
            } else {
                println!("{}", render_sweep(&sweep));
            }
        }
        Some(SweepAction::Cancel { id }) => {
            let answer = client.cancel_sweep(id).await?;
            println!(
                "sweep {id} cancelled: {} queued trials cancelled, {} running trials being stopped",
                answer["cancelled"], answer["cancel_requested"]
            );
        }
        None => create(client, &args.create).await?,
    }
    Ok(())
}

/// Creates the sweep; with `--wait`, follows its trials until they have
/// all ended and prints the sweep as `sweep show` does.
async fn create(client: &ApiClient, args: &CreateArgs) -> anyhow::Result<()> {
    let spec = args.spec()?;
    // Listen before creating, so not even the first dispatch is missed.
    let stream = match args.trials.wait {
        true => Some(follow::open(client, None).await?),
        false => None,
    };
    let created = client.create_sweep(&spec).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&created)?);
    } else {
        println!(
            "sweep {}: {} configurations, {} trials (tasks {}..{})",
            created.id,
            created.configs,
            created.trials,
            created.tasks.first().copied().unwrap_or_default(),
            created.tasks.last().copied().unwrap_or_default(),
        );
        if !created.metric_checked {
            println!(
                "note: the adapter declares no result metrics and none of its tasks has \
                 completed yet, so the metric could not be checked against what it reports"
            );
        }
        if stream.is_none() {
            println!("follow it with: trainyard sweep show {}", created.id);
        }
    }
    let Some(stream) = stream else {
        return Ok(());
    };
    follow::until_ended(client, &created.tasks, stream).await?;
    let sweep = client.sweep(created.id).await?;
    println!("\n{}", render_sweep(&sweep));
    if let Some(shortfall) = shortfall(&sweep) {
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
        args: SweepArgs,
    }

    fn spec(args: &[&str]) -> anyhow::Result<Value> {
        let cli = Cli::try_parse_from(std::iter::once("sweep").chain(args.iter().copied()))?;
        cli.args.create.spec()
    }

    #[test]
    fn flags_make_the_spec_of_the_issue_example() {
        let s = spec(&[
            "--adapter",
            "python-trainer",
            "--grid",
            "alpha=0.1,0.3",
            "--random",
            "gamma=uniform:0.9:0.999",
            "--samples",
            "8",
            "--seeds",
            "5",
            "--metric",
            "mean_return",
            "--max",
            "--param",
            "episodes=300",
            "--stop-at",
            "100,300,900",
        ])
        .unwrap();
        assert_eq!(
            s,
            serde_json::json!({
                "adapter": "python-trainer", "grid": {"alpha": [0.1, 0.3]},
                "random": {"gamma": "uniform:0.9:0.999"}, "samples": 8, "seeds": 5,
                "metric": "mean_return", "direction": "max", "params": {"episodes": 300},
                "early_stopping": {"milestones": [100, 300, 900]}
            })
        );
    }

    #[test]
    fn a_toml_file_reads_like_json_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sweep.toml");
        std::fs::write(
            &path,
            "adapter = \"python-trainer\"\nmetric = \"mean_return\"\nseeds = 3\n\
             [grid]\nlearning_rate = [0.1, 0.5]\n[random]\ndiscount = \"uniform:0.9:0.99\"\n",
        )
        .unwrap();
        let s = spec(&[
            "--file",
            path.to_str().unwrap(),
            "--seeds",
            "4",
            "--grid",
            "epsilon=1,0.5",
        ])
        .unwrap();
        assert_eq!(s["seeds"], 4);
        assert_eq!(s["grid"]["learning_rate"], serde_json::json!([0.1, 0.5]));
        assert_eq!(s["grid"]["epsilon"], serde_json::json!([1, 0.5]));
        assert_eq!(s["random"]["discount"], "uniform:0.9:0.99");
    }

    #[test]
    fn bad_flags_are_refused_before_the_master_is_asked() {
        assert!(spec(&[
            "--adapter",
            "a",
            "--metric",
            "m",
            "--random",
            "g=normal:0:1"
        ])
        .unwrap_err()
        .to_string()
        .contains("unknown distribution"));
        assert!(spec(&["--adapter", "a"])
            .unwrap_err()
            .to_string()
            .contains("--metric"));
        assert!(
            spec(&["--adapter", "a", "--metric", "m", "--grid", "alpha"])
                .unwrap_err()
                .to_string()
                .contains("KEY=VALUE")
        );
        assert!(spec(&["--metric", "m", "--max", "--min"]).is_err());
    }

    #[test]
    fn show_and_cancel_take_an_id() {
        let cli = Cli::try_parse_from(["sweep", "show", "7", "--json"]).unwrap();
        assert!(matches!(
            cli.args.action,
            Some(SweepAction::Show { id: 7, json: true })
        ));
        let cli = Cli::try_parse_from(["sweep", "cancel", "7"]).unwrap();
        assert!(matches!(
            cli.args.action,
            Some(SweepAction::Cancel { id: 7 })
        ));
    }
}
