//! `trainyard adapter ...`: the adapter author's commands, which work on
//! this machine alone (no master, Redis or database).
//!
//! - [`new`]: a ready project for a new adapter.

pub mod new;

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct AdapterArgs {
    #[command(subcommand)]
    pub command: AdapterCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdapterCommand {
    /// Create a ready project for a new adapter (Rust), with the contract vendored
    New(new::NewArgs),
}

/// Runs an adapter command.
pub async fn run(args: AdapterArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.command {
        AdapterCommand::New(args) => new::run(args)?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}
