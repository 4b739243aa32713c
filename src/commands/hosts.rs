//! `trainyard hosts`: every host the master has seen, what it carries and
//! what it runs, and whether it takes new work (drained, quarantined), as a
//! table (or JSON); with several masters, a line saying which one leads.
//! `trainyard hosts drain|undrain|unquarantine ID` changes the last.

use super::health::leadership_line;
use super::table::{render_environments_table, render_hosts_table, standing_lines_at};
use crate::client::ApiClient;

#[derive(Debug, Clone, clap::Args)]
pub struct HostsArgs {
    /// Print the hosts (or the answer) as JSON instead of a table
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub action: Option<HostAction>,
}

/// A change of a host's standing.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum HostAction {
    /// Give the host no new work; the attempts it runs finish
    Drain {
        #[arg(value_name = "ID")]
        id: String,
        /// Stop the attempts it runs now; their tasks are requeued without
        /// using an attempt
        #[arg(long)]
        now: bool,
    },
    /// Let a drained host take new work again
    Undrain {
        #[arg(value_name = "ID")]
        id: String,
    },
    /// Lift the host's quarantine now, without waiting for a probe task
    Unquarantine {
        #[arg(value_name = "ID")]
        id: String,
    },
}

pub async fn run(client: &ApiClient, args: HostsArgs) -> anyhow::Result<()> {
    if let Some(action) = args.action {
        return change(client, action, args.json).await;
    }
    let hosts = client.hosts().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&hosts)?);
    } else if hosts.is_empty() {
        println!("no host has connected to this master yet");
    } else {
        println!("{}", render_hosts_table(&hosts));
        for line in standing_lines_at(&hosts, trainyard_proto::now_ms()) {
            println!("{line}");
        }
        let environments = render_environments_table(&hosts);
        if !environments.is_empty() {
            println!("\nPython environments:\n{environments}");
        }
    }
    if !args.json {
        // Asked of the master that answered; a report it cannot give
        // leaves the hosts shown as they are.
        if let Some(line) = client
            .health()
            .await
            .ok()
            .as_ref()
            .and_then(leadership_line)
        {
            println!("{line}");
        }
    }
    Ok(())
}

async fn change(client: &ApiClient, action: HostAction, json: bool) -> anyhow::Result<()> {
    let (id, change, now) = match &action {
        HostAction::Drain { id, now } => (id, "drain", *now),
        HostAction::Undrain { id } => (id, "undrain", false),
        HostAction::Unquarantine { id } => (id, "unquarantine", false),
    };
    let answer = client.change_host(id, change, now).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    let state = answer["state"].as_str().unwrap_or("?");
    let said = match action {
        HostAction::Drain { now: true, .. } => {
            "drained: no new work; the attempts it ran are being stopped and requeued"
        }
        HostAction::Drain { now: false, .. } => "drained: no new work; the attempts it runs finish",
        HostAction::Undrain { .. } => "undrained",
        HostAction::Unquarantine { .. } => "quarantine lifted",
    };
    println!("host {id} {said} (now {state})");
    Ok(())
}
