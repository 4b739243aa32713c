//! `trainyard sweeps`: the sweeps, newest first, with their trials' states
//! (or JSON).

use super::format;
use super::sweep::counts;
use super::table::plain;
use crate::client::ApiClient;
use trainyard_master::search::SweepSummary;

#[derive(Debug, Clone, clap::Args)]
pub struct SweepsArgs {
    /// At most this many (newest first)
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Print the sweeps as JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// One sweep a line: ID, NAME, ADAPTER, METRIC, STATE, TRIALS, CREATED.
pub fn render_sweeps_table(sweeps: &[SweepSummary]) -> String {
    let rows = sweeps
        .iter()
        .map(|s| {
            vec![
                s.sweep.id.to_string(),
                format::or_dash(s.sweep.name.as_deref()),
                s.sweep.adapter.clone(),
                format!("{} ({})", s.sweep.metric, s.sweep.direction.as_str()),
                serde_json::to_value(s.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                format!("{}: {}", s.trial_count, counts(s)),
                format::timestamp(s.sweep.created_at_ms),
            ]
        })
        .collect();
    plain(
        &[
            "ID", "NAME", "ADAPTER", "METRIC", "STATE", "TRIALS", "CREATED",
        ],
        &[0],
        rows,
    )
}

pub async fn run(client: &ApiClient, args: SweepsArgs) -> anyhow::Result<()> {
    let sweeps = client.sweeps(args.limit).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sweeps)?);
    } else if sweeps.is_empty() {
        println!("no sweeps yet; create one with `trainyard sweep --adapter ... --metric ...`");
    } else {
        println!("{}", render_sweeps_table(&sweeps));
    }
    Ok(())
}
