//! `trainyard hosts`: every host the master has seen, what it carries and
//! what it runs, as a table (or JSON); with several masters, a line saying
//! which one leads.

use super::health::leadership_line;
use super::table::{render_environments_table, render_hosts_table};
use crate::client::ApiClient;

#[derive(Debug, Clone, clap::Args)]
pub struct HostsArgs {
    /// Print the hosts as JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

pub async fn run(client: &ApiClient, args: HostsArgs) -> anyhow::Result<()> {
    let hosts = client.hosts().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&hosts)?);
    } else if hosts.is_empty() {
        println!("no host has connected to this master yet");
    } else {
        println!("{}", render_hosts_table(&hosts));
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
