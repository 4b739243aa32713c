//! How `trainyard sweep show` (and `sweep --wait` at its end) prints a
//! sweep: its header, the ranking of its configurations over seeds, and its
//! trials; and what `--wait` counts as a shortfall.

use crate::commands::format::{self, or_dash};
use crate::commands::table::plain;
use serde_json::Value;
use trainyard_master::search::ranking::TrialState;
use trainyard_master::search::{SweepDetail, SweepState, SweepSummary};

/// `2 of 8 trials did not complete: 5 FAILED, 9 CANCELLED`, unless every
/// trial completed with the metric or was stopped early by the sweep.
pub fn shortfall(d: &SweepDetail) -> Option<String> {
    let short: Vec<String> = d
        .trials
        .iter()
        .filter_map(|t| {
            let why = match t.state {
                TrialState::Completed | TrialState::StoppedEarly => return None,
                TrialState::MissingMetric => "COMPLETED without the metric",
                TrialState::Failed => "FAILED",
                TrialState::Cancelled => "CANCELLED",
                TrialState::Pending | TrialState::Running => "unfinished",
            };
            Some(format!("{} {why}", t.task))
        })
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "{} of {} trials did not complete: {}",
            short.len(),
            d.trials.len(),
            short.join(", ")
        )
    })
}

/// Trial counts by state, e.g. `3 completed, 2 running, 1 stopped early`.
pub fn counts(summary: &SweepSummary) -> String {
    let label = |s: &TrialState| match s {
        TrialState::Pending => "pending",
        TrialState::Running => "running",
        TrialState::Completed => "completed",
        TrialState::MissingMetric => "completed without the metric",
        TrialState::Failed => "failed",
        TrialState::Cancelled => "cancelled",
        TrialState::StoppedEarly => "stopped early",
    };
    let parts: Vec<String> = summary
        .counts
        .iter()
        .map(|(s, n)| format!("{n} {}", label(s)))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn state(s: SweepState) -> &'static str {
    match s {
        SweepState::Running => "RUNNING",
        SweepState::Finished => "FINISHED",
        SweepState::Cancelled => "CANCELLED",
    }
}

/// A sweep: its header, the ranking over seeds, and the best configuration.
pub fn render_sweep(d: &SweepDetail) -> String {
    let s = &d.summary;
    let mut out = format!(
        "sweep       {}{}\nstate       {}\nadapter     {} ({})\nmetric      {} ({})\ntrials      {}: {}\n",
        s.sweep.id,
        s.sweep.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default(),
        state(s.state),
        s.sweep.adapter,
        s.sweep.kind,
        s.sweep.metric,
        s.sweep.direction.as_str(),
        s.trial_count,
        counts(s),
    );
    if let Some(seed) = d.spec.get("sweep_seed") {
        out.push_str(&format!("sweep seed  {seed}\n"));
    }
    let best = match d.ranking.best {
        Some(c) if d.ranking.unfinished > 0 => format!(
            "config {c} (so far: {} trials unfinished)",
            d.ranking.unfinished
        ),
        Some(c) => format!("config {c}"),
        None => "none yet (no trial completed with the metric)".into(),
    };
    out.push_str(&format!("best        {best}\n\n"));
    out.push_str(&ranking_table(d));
    out.push_str("\n\n");
    out.push_str(&trials_table(d));
    out
}

/// One line per trial, in trial order: its task, configuration, seed,
/// state, episodes so far and its value of the sweep's metric.
pub fn trials_table(d: &SweepDetail) -> String {
    let state = |s: TrialState| match s {
        TrialState::Pending => "PENDING",
        TrialState::Running => "RUNNING",
        TrialState::Completed => "COMPLETED",
        TrialState::MissingMetric => "NO METRIC",
        TrialState::Failed => "FAILED",
        TrialState::Cancelled => "CANCELLED",
        TrialState::StoppedEarly => "STOPPED EARLY",
    };
    let rows = d
        .trials
        .iter()
        .map(|t| {
            vec![
                t.task.to_string(),
                t.config.to_string(),
                t.seed.to_string(),
                state(t.state).to_string(),
                or_dash(t.episode),
                or_dash(t.value.map(format::number)),
            ]
        })
        .collect();
    let metric = d.summary.sweep.metric.to_uppercase();
    plain(
        &["TASK", "CONFIG", "SEED", "STATE", "EPISODE", &metric],
        &[0, 1, 2, 4, 5],
        rows,
    )
}

/// One line per configuration, best first.
pub fn ranking_table(d: &SweepDetail) -> String {
    let keys: Vec<String> = d
        .ranking
        .configs
        .first()
        .map(|c| c.params.keys().cloned().collect())
        .unwrap_or_default();
    let rows = d
        .ranking
        .configs
        .iter()
        .map(|c| {
            let mut row = vec![or_dash(c.rank), c.config.to_string()];
            row.extend(keys.iter().map(|k| match c.params.get(k) {
                Some(Value::Number(n)) => n.as_f64().map_or(n.to_string(), format::number),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => format::MISSING.into(),
            }));
            row.push(or_dash(c.mean.map(format::number)));
            row.push(or_dash(c.std.map(format::number)));
            row.push(format!("{}/{}", c.n, c.trials));
            let mut notes = vec![];
            if c.unfinished > 0 {
                notes.push(format!("{} unfinished", c.unfinished));
            }
            if c.stopped_early > 0 {
                notes.push(format!("stopped early at {}", or_dash(c.stopped_at)));
            }
            if c.failed > 0 {
                notes.push(format!("{} failed", c.failed));
            }
            if c.cancelled > 0 {
                notes.push(format!("{} cancelled", c.cancelled));
            }
            row.push(notes.join(", "));
            row
        })
        .collect();
    let mut header = vec!["RANK", "CONFIG"];
    header.extend(keys.iter().map(|k| k.as_str()));
    header.extend(["MEAN", "STD", "N", "NOTES"]);
    let n = header.len();
    plain(&header, &[0, 1, n - 4, n - 3, n - 2], rows)
}
