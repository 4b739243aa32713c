//! trainyard runs reinforcement-learning training jobs on a fleet of worker
//! hosts. This crate is the `trainyard` binary's library: the command line,
//! configuration, the operator commands that talk to the master's API, and
//! the demo. The master and the host live in their own crates
//! (`trainyard-master`, `trainyard-host`); what they share in
//! `trainyard-proto`.
//!
//! # Layout
//! - [`cli`]: subcommands and flags.
//! - [`settings`]: defaults < `config.toml` < environment < flags.
//! - [`secrets`]: the cluster secret and the API token.
//! - [`roles`]: running a master or a host from the settings.
//! - [`data_dir`]: the master's files, private to its user.
//! - [`tls`]: what each role makes of the `[tls]` settings; [`certs`]:
//!   `trainyard certs`, a development CA and certificates.
//! - [`client`], [`commands`]: the HTTP API client and operator commands.
//! - [`cluster`]: starting real master and host processes (the demo,
//!   benchmarks and tests use it), on a private `redis-server`
//!   ([`trainyard_local_redis`]) when no Redis is configured.
//! - [`demo`]: `trainyard demo`; [`dev`]: `trainyard dev`, a local cluster
//!   around one adapter.
//! - [`logging`]: tracing set-up.

pub mod certs;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod commands;
pub mod data_dir;
pub mod demo;
pub mod dev;
pub mod logging;
pub mod roles;
pub mod secrets;
pub mod settings;
pub mod tls;

use cli::{Cli, Command};
use std::process::ExitCode;

/// Runs one command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let flags = match &cli.command {
        Command::Master(a) => a.overrides(),
        Command::Host(a) => a.overrides(),
        _ => serde_json::json!({}),
    };
    let inputs = settings::Inputs::from_process(cli.config.as_deref(), &cli.set, flags);
    let (settings, source) = settings::Settings::load_from(inputs)?;
    match &source.file {
        Some(f) => tracing::debug!(file = %f.display(), "configuration read"),
        None => tracing::debug!("no config file; using defaults and the environment"),
    }
    let client = || -> anyhow::Result<client::ApiClient> {
        Ok(client::ApiClient::with_tls(
            &settings.api.url,
            secrets::api_token(&settings.api, false).ok(),
            tls::api_client(&settings)?.as_ref(),
        )?)
    };
    match cli.command {
        Command::Master(_) => {
            log_source(&source, "master");
            roles::run_master(&settings).await?;
        }
        Command::Host(_) => {
            log_source(&source, "host");
            roles::run_host(&settings).await?;
        }
        Command::Submit(args) => commands::submit::run(&client()?, args).await?,
        Command::Tasks(args) => commands::tasks::run(&client()?, args).await?,
        Command::Task(args) => commands::task::run(&client()?, args).await?,
        Command::Hosts(args) => commands::hosts::run(&client()?, args).await?,
        Command::Team(args) => commands::access::team(&client()?, args).await?,
        Command::Token(args) => commands::access::token(&client()?, args).await?,
        Command::Audit(args) => commands::access::audit(&client()?, args).await?,
        Command::Whoami => commands::access::whoami(&client()?).await?,
        Command::Health(args) => commands::health::run(&client()?, args).await?,
        Command::Cancel(args) => commands::cancel::run(&client()?, args).await?,
        Command::Logs(args) => commands::logs::run(&client()?, args).await?,
        Command::Progress(args) => commands::progress::run(&client()?, args).await?,
        Command::Artifacts(args) => commands::artifacts::list(&client()?, args).await?,
        Command::Download(args) => commands::artifacts::download(&client()?, args).await?,
        Command::Sweep(args) => commands::sweep::run(&client()?, args).await?,
        Command::Sweeps(args) => commands::sweeps::run(&client()?, args).await?,
        Command::Watch(args) => commands::watch::run(&client()?, args).await?,
        Command::Demo(args) => return demo::run(args).await,
        Command::Dev(args) => return dev::run(&settings, &source, args).await,
        Command::Secret => println!("{}", trainyard_proto::auth::ClusterSecret::generate_hex()),
        Command::Certs(args) => {
            let report = certs::write(&certs::Request {
                dir: &args.out,
                master_names: &args.master_name,
                hosts: &args.host,
                days: args.days,
                reissue: args.reissue,
            })?;
            for (outcome, path) in &report.files {
                println!("{outcome:<8} {}", path.display());
            }
            for note in &report.notes {
                eprintln!("note: {note}");
            }
        }
        Command::Config(args) => commands::config::run(&settings, &source, args)?,
        Command::Adapter(args) => return commands::adapter::run(&settings, &source, args).await,
    }
    Ok(ExitCode::SUCCESS)
}

fn log_source(source: &settings::Source, role: &str) {
    match &source.file {
        Some(f) => tracing::info!(file = %f.display(), "{role} configuration read"),
        None => tracing::info!("{role}: no config file; using defaults, the environment and flags"),
    }
}
