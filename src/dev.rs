//! `trainyard dev ADAPTER.wasm`: a whole cluster on this machine around one
//! adapter, for its author. It loads the adapter (so a broken one is said
//! at once), starts a private Redis (unless `TRAINYARD_REDIS_URL` names
//! one), a master on a fresh SQLite database and one host carrying the
//! adapter with the programs it may launch, then prints the dashboard's URL
//! and the command that submits a task to it, and stays up until Ctrl-C
//! (or SIGTERM), when it stops everything it started. The host watches the
//! adapter's file: a rebuilt adapter is picked up without a restart.
//!
//! The cluster lives in a directory of its own (a temporary one unless
//! `--dir` names one), with its config file, database and logs; it is
//! removed at the end unless `--keep` (or `--dir`) says otherwise. What
//! compiling the adapter takes goes to the adapter tools' cache
//! ([`crate::commands::adapter::cache`]), shared with the host.

use crate::cluster::{Binaries, Cluster, Process};
use crate::commands::adapter::cache;
use crate::settings::{AdapterEntry, Settings, Source};
use anyhow::{bail, Context};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use trainyard_host::python_env::PythonRequirements;
use trainyard_host::runtime::AdapterRuntime;

/// The host of a dev cluster.
const HOST: &str = "dev-host";
/// What the adapter may launch when no `--program` is given: what the
/// adapter templates launch.
const DEFAULT_PROGRAM: &str = "python3";
/// How long the master and the host may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Args)]
pub struct DevArgs {
    /// The adapter component (.wasm)
    pub file: PathBuf,
    /// A program the adapter may launch (repeatable) [default: python3]
    #[arg(long = "program", value_name = "NAME")]
    pub programs: Vec<String>,
    /// A requirements.txt: the trainer runs in a Python environment the host
    /// builds from it (with uv, `host.python.uv`)
    #[arg(long, value_name = "FILE")]
    pub requirements: Option<PathBuf>,
    /// Tasks the host runs at once
    #[arg(long, default_value_t = 2)]
    pub slots: u32,
    /// The cluster's directory (config, database, logs, workspaces), kept
    /// afterwards [default: a temporary directory, removed at the end]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the temporary directory afterwards
    #[arg(long)]
    pub keep: bool,
}

pub async fn run(settings: &Settings, source: &Source, args: DevArgs) -> anyhow::Result<ExitCode> {
    let bins = Binaries::current()?;
    let tools = cache::for_tools(settings, source);
    let file = args
        .file
        .canonicalize()
        .with_context(|| format!("cannot read adapter {}", args.file.display()))?;
    let runtime = AdapterRuntime::new(crate::roles::runtime_config(&tools))?;
    let loaded = runtime
        .load(&file)
        .await
        .with_context(|| format!("{} is not an adapter trainyard can load", file.display()))?;
    let info = loaded.info().clone();
    let programs = match args.programs.as_slice() {
        [] => vec![DEFAULT_PROGRAM.to_string()],
        given => given.to_vec(),
    };
    println!(
        "Adapter {} {} ({}), kinds: {}; programs: {}",
        info.name,
        info.version,
        file.display(),
        info.kinds.join(", "),
        programs.join(", ")
    );

    let (redis_url, _redis) = crate::demo::local_redis()?;
    let (dir, scratch) = match &args.dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let scratch = tempfile::Builder::new()
                .prefix("trainyard-dev-")
                .tempdir()
                .context("cannot make the cluster's directory")?;
            (scratch.path().to_path_buf(), Some(scratch))
        }
    };
    let cluster = configure(&dir, bins, &redis_url, &file, programs, &args, &tools)?;
    println!(
        "Cluster directory: {} (config, database, logs)",
        cluster.dir.display()
    );
    let mut processes: Vec<Process> = vec![];
    let outcome = serve(&cluster, &mut processes, &info.name).await;
    for p in processes.iter_mut().rev() {
        p.stop(Duration::from_secs(10));
    }
    crate::cluster::remove_cgroup_parent(&cluster.settings);
    match scratch {
        Some(scratch) if args.keep || outcome.is_err() => {
            println!("Cluster directory kept: {}", scratch.keep().display());
        }
        _ => {}
    }
    outcome.map(|()| ExitCode::SUCCESS)
}

/// The cluster's settings: every path inside `dir`, one host carrying the
/// adapter at `file`, the compiled adapter shared with the tools' cache.
fn configure(
    dir: &Path,
    bins: Binaries,
    redis_url: &str,
    file: &Path,
    programs: Vec<String>,
    args: &DevArgs,
    tools: &Settings,
) -> anyhow::Result<Cluster> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let db = dir.canonicalize()?.join("trainyard.db");
    let mut cluster = Cluster::new(dir, bins, redis_url, &format!("sqlite://{}", db.display()))?;
    let s = &mut cluster.settings;
    s.redis_key_prefix = format!("dev-{}:", std::process::id());
    // A one-person cluster on loopback: its dashboard opens without a token.
    s.api.open_reads = true;
    s.host.slots = args.slots;
    s.host.adapter_cache_dir = tools.host.adapter_cache_dir.clone();
    let programs: Vec<&str> = programs.iter().map(String::as_str).collect();
    let mut entry = AdapterEntry::new(file, &programs);
    if let Some(path) = &args.requirements {
        let listed = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --requirements {}", path.display()))?;
        entry.python = Some(PythonRequirements::from_lines(&listed));
    }
    s.host.adapters = vec![entry];
    cluster.write_config()?;
    cluster.env.push((
        "RUST_LOG".into(),
        std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
    ));
    Ok(cluster)
}

/// Starts the master and the host, says how to use them, and waits for
/// Ctrl-C; fails if either process dies meanwhile.
async fn serve(
    cluster: &Cluster,
    processes: &mut Vec<Process>,
    adapter: &str,
) -> anyhow::Result<()> {
    // Listening before anything starts: a Ctrl-C from here on stops the
    // cluster cleanly, not the process before it cleans up.
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    processes.push(cluster.spawn_master()?);
    let client = cluster.wait_for_master(START_TIMEOUT).await?;
    processes.push(cluster.spawn_host(HOST)?);
    cluster.wait_for_hosts(&client, 1, START_TIMEOUT).await?;
    println!("Dashboard: {}", crate::demo::dashboard_url(cluster));
    println!("Submit a task:");
    println!(
        "  trainyard --config {} submit --adapter {adapter} --wait",
        cluster.config_path.display()
    );
    println!(
        "(or export TRAINYARD_CONFIG={} for every command)",
        cluster.config_path.display()
    );
    println!("Press Ctrl-C to stop.");
    let mut check = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            biased;
            _ = interrupt.recv() => {
                println!("Stopping.");
                return Ok(());
            }
            _ = terminate.recv() => {
                println!("Stopping.");
                return Ok(());
            }
            _ = check.tick() => {
                if let Some(dead) = processes.iter_mut().position(|p| !p.running()) {
                    let dead = &processes[dead];
                    bail!("the {} stopped; its log is {}", dead.name, dead.log.display());
                }
            }
        }
    }
}
