//! `trainyard adapter`: an adapter author's tools, which need no master,
//! Redis or database. `new` makes a ready project; `run` runs one attempt
//! on this machine exactly as a host would; `check` runs the conformance
//! suite against an adapter's fresh instances.

pub mod cache;
pub mod check;
pub mod new;
pub mod run;

use crate::settings::{Settings, Source};
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct AdapterArgs {
    #[command(subcommand)]
    pub command: AdapterCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdapterCommand {
    /// Create a ready project for a new adapter, with the contract vendored
    New(new::NewArgs),
    /// Run one attempt of an adapter on this machine, through the host's
    /// runtime, limits and containment, and print what happens
    Run(run::RunArgs),
    /// Check that an adapter keeps the contract: it loads, describes itself
    /// within bounds, and survives bad params, odd output lines and every
    /// exit status
    Check(check::CheckArgs),
}

impl AdapterCommand {
    /// Whether the command launches a trainer.
    pub fn runs_processes(&self) -> bool {
        matches!(self, AdapterCommand::Run(_))
    }
}

/// Runs the subcommand; the exit code says whether the adapter passed.
pub async fn run(
    settings: &Settings,
    source: &Source,
    args: AdapterArgs,
) -> anyhow::Result<ExitCode> {
    // What they compile goes to the user's cache, not into the project.
    let settings = &cache::for_tools(settings, source);
    match args.command {
        AdapterCommand::New(args) => new::run(args).map(|()| ExitCode::SUCCESS),
        AdapterCommand::Run(args) => run::run(settings, source, args).await,
        AdapterCommand::Check(args) => check::run(settings, args).await,
    }
}
