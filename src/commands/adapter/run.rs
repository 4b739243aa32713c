//! `trainyard adapter run FILE.wasm`: one attempt on this machine, with no
//! master, Redis or database, through the host's own runtime, limits, plan
//! allowlist, Python environment and containment
//! ([`trainyard_host::local`]). Prints each progress event and captured
//! line as it happens, then the result or the classified error and the
//! trainer's stderr tail. Exits 0 only when the attempt completed.
//!
//! The host settings are the effective configuration, as for `trainyard
//! host`. The adapter's entry is the `[[host.adapters]]` entry of the same
//! file when there is one, else it is made from the flags.

use crate::commands::format;
use crate::settings::{Origin, Settings, Source};
use anyhow::{bail, Context};
use clap::Args;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use trainyard_host::config::{AdapterConfig, HostConfig};
use trainyard_host::containment::{AdapterContainment, NetworkMode};
use trainyard_host::local::{Happening, LocalHost, LocalReport, LocalTask};
use trainyard_host::process::ExitKind;
use trainyard_host::python_env::PythonRequirements;
use trainyard_host::runtime::AdapterRuntime;
use trainyard_proto::messages::{Checkpoint, LogBatch, Outcome, Progress, ProgressUpdate};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The adapter component (.wasm)
    pub file: PathBuf,
    /// The task kind [default: the adapter's first]
    #[arg(long)]
    pub kind: Option<String>,
    /// A task parameter; VALUE is read as JSON if it is JSON, else as a
    /// string: --param episodes=50 --param env=grid (repeatable, over --params)
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub param: Vec<String>,
    /// The task's params as a JSON object [default: {}]
    #[arg(long, value_name = "JSON")]
    pub params: Option<String>,
    /// A checkpoint file handed to the attempt as an earlier attempt's (it is
    /// placed in the workspace under its file name)
    #[arg(long, value_name = "CHECKPOINT")]
    pub resume: Option<PathBuf>,
    /// Keep the workspace afterwards and print where it is
    #[arg(long)]
    pub keep_workspace: bool,
    /// Stop the trainer after this many seconds, as a task's timeout would
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// A program the adapter may launch, when no [[host.adapters]] entry
    /// names this file (repeatable)
    #[arg(long = "program", value_name = "NAME")]
    pub programs: Vec<String>,
    /// The trainer's network when no entry names this file: none (only its
    /// own loopback) or host
    #[arg(long, value_enum)]
    pub network: Option<Network>,
    /// A requirements.txt: the trainer runs in a Python environment built
    /// from it, when no entry names this file
    #[arg(long, value_name = "FILE")]
    pub requirements: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Network {
    None,
    Host,
}

pub async fn run(settings: &Settings, source: &Source, args: RunArgs) -> anyhow::Result<ExitCode> {
    let task = LocalTask {
        kind: args.kind.clone().unwrap_or_default(),
        params: task_params(args.params.as_deref(), &args.param)?,
        resume: None,
        timeout_secs: args.timeout,
    };
    let mut config = crate::roles::local_host_config(settings)?;
    // Each progress event is printed as it happens, not batched for a master.
    config.progress_interval = std::time::Duration::ZERO;
    // Workspaces go to a directory of their own unless one is configured.
    let scratch = match source.origin("host.work_dir") {
        Origin::Default => Some(scratch_dir()?),
        _ => None,
    };
    if let Some(dir) = &scratch {
        config.work_dir = dir.path().join("work");
    }
    let task = LocalTask {
        resume: read_resume(args.resume.as_deref(), config.max_checkpoint_bytes)?,
        ..task
    };
    let entry = adapter_entry(&config, &args)?;
    let runtime = AdapterRuntime::new(config.runtime.clone())?;
    let host = LocalHost::start(config, &runtime, &entry).await?;
    let info = host.adapter().loaded.info();
    println!(
        "adapter {} {} ({}), containment: {}",
        info.name,
        info.version,
        entry.path.display(),
        layers(&host.layers())
    );
    let programs = host.adapter().allowlist.names();
    if programs.is_empty() {
        println!("programs: none; allow what it launches with --program NAME");
    } else {
        println!("programs: {}", programs.join(", "));
    }
    let report = host
        .run(
            &task,
            args.keep_workspace,
            crate::roles::terminated(),
            print_happening,
        )
        .await;
    print_report(&report);
    if report.kept_workspace.is_some() {
        // The scratch directory holds the kept workspace: leave it.
        let _ = scratch.map(tempfile::TempDir::keep);
    }
    Ok(match report.outcome {
        Outcome::Completed { .. } => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

/// A private directory for the run's workspace that the trainer's user may
/// pass through (mode 0711), as a host's work directory.
fn scratch_dir() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("trainyard-run-")
        .tempdir()
        .context("cannot make a directory for the workspace")?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))?;
    Ok(dir)
}

/// The task's params: `json` (an object, `{}` if absent) with each
/// `KEY=VALUE` of `pairs` set over it.
pub fn task_params(json: Option<&str>, pairs: &[String]) -> anyhow::Result<String> {
    use serde_json::Value;
    let mut params = match json.map(serde_json::from_str::<Value>).transpose() {
        Err(e) => bail!("--params is not JSON: {e}"),
        Ok(None) => serde_json::Map::new(),
        Ok(Some(Value::Object(map))) => map,
        Ok(Some(other)) => bail!("--params must be a JSON object, not {other}"),
    };
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--param {pair:?} is not KEY=VALUE");
        };
        if key.is_empty() {
            bail!("--param {pair:?} has no key");
        }
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
        params.insert(key.to_owned(), value);
    }
    Ok(Value::Object(params).to_string())
}

/// The checkpoint to resume from: its file name and content.
fn read_resume(path: Option<&Path>, limit: u64) -> anyhow::Result<Option<(String, Vec<u8>)>> {
    let Some(path) = path else { return Ok(None) };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("--resume {}: not a file name", path.display()))?;
    let data =
        std::fs::read(path).with_context(|| format!("cannot read --resume {}", path.display()))?;
    if data.len() as u64 > limit {
        bail!(
            "--resume {} holds {}, over host.max_checkpoint_bytes ({}): a host would not hand it on",
            path.display(),
            format::bytes(data.len() as u64),
            format::bytes(limit)
        );
    }
    Ok(Some((name.to_owned(), data)))
}

/// The `[[host.adapters]]` entry of `args.file`, else an entry made from
/// the flags.
fn adapter_entry(config: &HostConfig, args: &RunArgs) -> anyhow::Result<AdapterConfig> {
    let file = args
        .file
        .canonicalize()
        .with_context(|| format!("cannot read adapter {}", args.file.display()))?;
    let configured = config
        .adapters
        .iter()
        .find(|a| a.path.canonicalize().is_ok_and(|p| p == file));
    let flags_given =
        !args.programs.is_empty() || args.network.is_some() || args.requirements.is_some();
    match configured {
        Some(_) if flags_given => bail!(
            "{} has an entry in [[host.adapters]], which sets its programs, network and \
             requirements; change the entry, or drop --program, --network and --requirements",
            args.file.display()
        ),
        Some(entry) => Ok(entry.clone()),
        None => Ok(AdapterConfig {
            path: args.file.clone(),
            programs: args.programs.clone(),
            containment: AdapterContainment {
                network: match args.network {
                    Some(Network::Host) => NetworkMode::Host,
                    Some(Network::None) | None => NetworkMode::None,
                },
                ..AdapterContainment::default()
            },
            python: match &args.requirements {
                None => None,
                Some(path) => Some(PythonRequirements::from_lines(
                    &std::fs::read_to_string(path).with_context(|| {
                        format!("cannot read --requirements {}", path.display())
                    })?,
                )),
            },
            progress_timeout: None,
        }),
    }
}

fn layers(layers: &[String]) -> String {
    if layers.is_empty() {
        "none (every layer is off in [host.containment])".to_owned()
    } else {
        layers.join(", ")
    }
}

/// Prints one happening as it comes, on stdout, in order.
fn print_happening(happening: Happening) {
    match happening {
        Happening::Lines(batch) => print_lines(&batch),
        Happening::Progress(update) => print_progress(&update),
    }
}

fn print_lines(batch: &LogBatch) {
    for line in &batch.lines {
        println!("[{}] {}", line.stream.as_str(), line.text);
    }
}

fn print_progress(update: &ProgressUpdate) {
    for progress in update
        .earlier
        .iter()
        .chain(std::iter::once(&update.progress))
    {
        println!("[progress] {}", progress_text(progress));
    }
    if let Some(checkpoint) = &update.checkpoint {
        println!("[checkpoint] {}", checkpoint_text(checkpoint));
    }
}

/// One progress event on one line: `episode 10/200 return 3.5 loss=0.12 — note`.
pub fn progress_text(p: &Progress) -> String {
    let mut parts = vec![];
    match (p.episode, p.total_episodes) {
        (Some(e), Some(t)) => parts.push(format!("episode {e}/{t}")),
        (Some(e), None) => parts.push(format!("episode {e}")),
        (None, _) => {}
    }
    if let Some(r) = p.episode_return {
        parts.push(format!("return {}", format::number(r)));
    }
    parts.extend(
        p.metrics
            .iter()
            .map(|m| format!("{}={}", m.name, format::number(m.value))),
    );
    if let Some(message) = &p.message {
        parts.push(format!("— {}", format::one_line(message, 200)));
    }
    if parts.is_empty() {
        "(an event with no figures)".to_owned()
    } else {
        parts.join(" ")
    }
}

fn checkpoint_text(checkpoint: &Checkpoint) -> String {
    match checkpoint {
        Checkpoint::File { name, data } => {
            format!("{name} ({})", format::bytes(data.len() as u64))
        }
        Checkpoint::External(reference) => format!("external {reference}"),
        Checkpoint::Stored { name, object } => {
            format!("{name} ({}, stored)", format::bytes(object.size))
        }
    }
}

/// The attempt's end: the result or the classified error, how the trainer
/// ended and the end of its stderr, and where the workspace was kept.
fn print_report(report: &LocalReport) {
    let took = format::duration(report.duration);
    let ok = matches!(report.outcome, Outcome::Completed { .. });
    match &report.outcome {
        Outcome::Completed {
            metrics,
            summary,
            checkpoint,
        } => {
            println!("result: completed in {took}");
            for m in metrics {
                println!("  metric {} = {}", m.name, format::number(m.value));
            }
            if let Some(summary) = summary {
                println!("  summary: {summary}");
            }
            if let Some(c) = checkpoint {
                println!("  checkpoint: {}", checkpoint_text(c));
            }
        }
        Outcome::Failed { message, retryable } => {
            let class = if *retryable {
                "retryable: a host would try again"
            } else {
                "not retryable: the task would end FAILED"
            };
            println!("result: failed after {took} ({class})\n  error: {message}");
        }
        Outcome::HostFault { message } => println!(
            "result: failed after {took} (the host's fault: a host would requeue the task \
             without using an attempt)\n  error: {message}"
        ),
        Outcome::Cancelled => println!("result: cancelled after {took}"),
        Outcome::LeaseLost { message } => println!("result: stopped after {took}: {message}"),
        Outcome::Stalled { message } => println!(
            "result: stalled after {took} (a host would requeue the task from its last \
             checkpoint)\n  error: {message}"
        ),
    }
    if let Some(exit) = &report.trainer {
        println!(
            "trainer: {} after {}",
            exit_text(&exit.status),
            format::duration(exit.duration)
        );
        let tail = exit.stderr_tail.trim_end();
        if !ok && !tail.is_empty() {
            println!("trainer stderr (last lines):");
            for line in tail.lines() {
                println!("  {line}");
            }
        }
    }
    if let Some(path) = &report.kept_workspace {
        println!("workspace kept at {}", path.display());
    }
}

fn exit_text(status: &ExitKind) -> String {
    match status {
        ExitKind::Exited(code) => format!("exited with {code}"),
        ExitKind::Signaled(signal) => format!("killed by signal {signal}"),
        ExitKind::LeaseExpired => "stopped by its supervisor at its deadline".to_owned(),
        ExitKind::SupervisorLost(why) => format!("lost its supervisor: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_the_json_object_with_each_pair_set_over_it() {
        let params = task_params(
            Some(r#"{"episodes": 5, "env": "grid"}"#),
            &["episodes=50".into(), "name=a=b".into(), "fast=true".into()],
        )
        .unwrap();
        let value: serde_json::Value = serde_json::from_str(&params).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"episodes": 50, "env": "grid", "name": "a=b", "fast": true})
        );
        assert_eq!(task_params(None, &[]).unwrap(), "{}");
    }

    #[test]
    fn bad_params_flags_are_refused_with_the_flag_named() {
        for (json, pairs) in [
            (Some("[1]"), vec![]),
            (Some("{oops"), vec![]),
            (None, vec!["novalue".to_string()]),
            (None, vec!["=1".to_string()]),
        ] {
            let e = task_params(json, &pairs).unwrap_err().to_string();
            assert!(e.contains("--param"), "{e}");
        }
    }
}
