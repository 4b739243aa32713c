//! The operator commands' tables: tasks, hosts, a task's attempts, and the
//! final table of a batch (`submit --wait`, the demo). Plain text columns
//! separated by two spaces, no borders and no colours, so they read the
//! same in a terminal and in a log; a missing value shows as `-`.

use super::format::{self, or_dash, MISSING};
use crate::client::HostView;
use comfy_table::{CellAlignment, Table};
use std::time::Duration;
use trainyard_master::model::{Attempt, Task, TaskStatus};
use trainyard_proto::TaskId;

/// Longest name or error shown in a table cell; the task report shows it whole.
const MAX_TEXT: usize = 60;

/// A task's line in the final table of a batch.
#[derive(Clone, Debug, PartialEq)]
pub struct FinalRow {
    pub task: TaskId,
    pub host: String,
    pub attempt: u32,
    pub status: TaskStatus,
    /// `mean_return` if reported, else the first metric.
    pub metric: Option<(String, f64)>,
    /// From the start of the run to its end.
    pub duration: Option<Duration>,
    pub error: Option<String>,
}

impl FinalRow {
    pub fn from_task(t: &Task) -> Self {
        Self {
            task: t.id,
            host: t.host.clone().unwrap_or_else(|| MISSING.into()),
            attempt: t.attempt,
            status: t.status,
            metric: t
                .result
                .as_ref()
                .and_then(|r| format::final_metric(&r.metrics)),
            duration: format::span(t.started_at_ms, t.finished_at_ms),
            error: t.error.clone(),
        }
    }
}

/// Tasks, one a line: ID, NAME, ADAPTER, STATUS, ATTEMPT, HOST, PROGRESS,
/// RETURN, AGE/DURATION.
pub fn render_tasks_table(tasks: &[Task]) -> String {
    tasks_table_at(tasks, trainyard_proto::now_ms())
}

/// [`render_tasks_table`] as seen at `now_ms`.
pub fn tasks_table_at(tasks: &[Task], now_ms: i64) -> String {
    let rows = tasks
        .iter()
        .map(|t| {
            let status = if t.cancel_requested && !t.status.is_terminal() {
                format!("{} (cancelling)", t.status)
            } else {
                t.status.to_string()
            };
            vec![
                t.id.to_string(),
                or_dash(t.name.as_deref().map(|n| format::one_line(n, MAX_TEXT))),
                t.adapter.clone(),
                status,
                t.attempt.to_string(),
                or_dash(t.host.as_deref()),
                or_dash(t.progress.as_ref().and_then(format::episodes)),
                or_dash(latest_return(t).map(format::number)),
                age_or_duration(t, now_ms),
            ]
        })
        .collect();
    plain(
        &[
            "ID",
            "NAME",
            "ADAPTER",
            "STATUS",
            "ATTEMPT",
            "HOST",
            "PROGRESS",
            "RETURN",
            "AGE/DURATION",
        ],
        &[0, 4, 6, 7],
        rows,
    )
}

/// The figure of the RETURN column: a finished task's final metric, else
/// the latest episode return of the running attempt.
fn latest_return(t: &Task) -> Option<f64> {
    t.result
        .as_ref()
        .and_then(|r| format::final_metric(&r.metrics))
        .map(|(_, v)| v)
        .or_else(|| t.progress.as_ref().and_then(|p| p.episode_return))
}

/// How long an ended task ran, or how long ago a live one was submitted.
fn age_or_duration(t: &Task, now_ms: i64) -> String {
    if t.status.is_terminal() {
        let from = t.started_at_ms.or(Some(t.created_at_ms));
        format::span(from, t.finished_at_ms).map_or_else(
            || MISSING.into(),
            |d| format!("took {}", format::duration(d)),
        )
    } else {
        format!(
            "age {}",
            format::duration(format::span(Some(t.created_at_ms), Some(now_ms)).unwrap_or_default())
        )
    }
}

/// The final table of a batch: TASK, HOST, ATTEMPT, STATUS, FINAL METRIC,
/// DURATION, and ERROR when any task has one.
pub fn render_final_table(rows: &[FinalRow]) -> String {
    let with_errors = rows.iter().any(|r| r.error.is_some());
    let mut header = vec![
        "TASK",
        "HOST",
        "ATTEMPT",
        "STATUS",
        "FINAL METRIC",
        "DURATION",
    ];
    if with_errors {
        header.push("ERROR");
    }
    let cells = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.task.to_string(),
                r.host.clone(),
                r.attempt.to_string(),
                r.status.to_string(),
                or_dash(
                    r.metric
                        .as_ref()
                        .map(|(name, v)| format!("{name} {}", format::number(*v))),
                ),
                or_dash(r.duration.map(format::duration)),
            ];
            if with_errors {
                row.push(or_dash(
                    r.error.as_deref().map(|e| format::one_line(e, MAX_TEXT)),
                ));
            }
            row
        })
        .collect();
    plain(&header, &[0, 2, 5], cells)
}

/// Hosts: HOST, CONNECTED, SLOTS (busy/total), ADAPTERS, RUNNING
/// (task@attempt), LAST SEEN.
pub fn render_hosts_table(hosts: &[HostView]) -> String {
    hosts_table_at(hosts, trainyard_proto::now_ms())
}

/// [`render_hosts_table`] as seen at `now_ms`.
pub fn hosts_table_at(hosts: &[HostView], now_ms: i64) -> String {
    let rows = hosts
        .iter()
        .map(|h| {
            let slots = if h.connected {
                format!("{}/{}", h.slots.saturating_sub(h.free_slots), h.slots)
            } else {
                format!("{MISSING}/{}", h.slots)
            };
            let gpus = match (&h.capacity, h.connected) {
                (Some(c), _) if c.gpus.is_empty() => MISSING.to_string(),
                (Some(c), true) => format!(
                    "{}/{}",
                    (c.gpus.len() as u32).saturating_sub(h.free.gpus),
                    c.gpus.len()
                ),
                (Some(c), false) => format!("{MISSING}/{}", c.gpus.len()),
                (None, _) => MISSING.to_string(),
            };
            let adapters: Vec<String> = h
                .adapters
                .iter()
                .map(|a| format!("{}@{}", a.name, a.version))
                .collect();
            let running: Vec<String> = h
                .running
                .iter()
                .map(|r| format!("{}@{}", r.task, r.attempt))
                .collect();
            let ago = format::span(Some(h.last_seen_ms), Some(now_ms)).unwrap_or_default();
            let containment = match (h.connected, h.containment.is_empty()) {
                (false, _) => MISSING.to_string(),
                // Said plainly: its trainers run with the host's rights.
                (true, true) => "NONE".to_string(),
                (true, false) => h.containment.join(", "),
            };
            vec![
                h.id.clone(),
                if h.connected { "yes" } else { "no" }.to_string(),
                if h.state.is_empty() {
                    MISSING.to_string()
                } else {
                    h.state.clone()
                },
                slots,
                gpus,
                if adapters.is_empty() {
                    MISSING.into()
                } else {
                    adapters.join(", ")
                },
                containment,
                if running.is_empty() {
                    MISSING.into()
                } else {
                    running.join(", ")
                },
                format!("{} ago", format::duration(ago)),
            ]
        })
        .collect();
    plain(
        &[
            "HOST",
            "CONNECTED",
            "STATE",
            "SLOTS",
            "GPUS",
            "ADAPTERS",
            "CONTAINMENT",
            "RUNNING",
            "LAST SEEN",
        ],
        &[3, 4],
        rows,
    )
}

/// One line for each host that takes no new work: drained since when, or
/// quarantined since when, why, its last error and its next probe.
pub fn standing_lines_at(hosts: &[HostView], now_ms: i64) -> Vec<String> {
    let ago = |at: i64| {
        let took = format::span(Some(at), Some(now_ms)).unwrap_or_default();
        format!("{} ago", format::duration(took))
    };
    let mut lines = vec![];
    for h in hosts {
        if let Some(q) = &h.standing.quarantine {
            let mut line = format!("{} quarantined {}: {}", h.id, ago(q.since_ms), q.reason);
            if let Some(e) = &q.last_error {
                line.push_str(&format!("; last error: {}", format::one_line(e, 300)));
            }
            let next = if q.next_probe_at_ms <= now_ms {
                "due".to_string()
            } else {
                let wait = format::span(Some(now_ms), Some(q.next_probe_at_ms)).unwrap_or_default();
                format!("in {}", format::duration(wait))
            };
            line.push_str(&format!(
                "; probe task {next} (or `trainyard hosts unquarantine {}`)",
                h.id
            ));
            lines.push(line);
        }
        if let Some(at) = h.standing.drained_at_ms {
            lines.push(format!(
                "{} drained {}: no new work (`trainyard hosts undrain {}`)",
                h.id,
                ago(at),
                h.id
            ));
        }
    }
    lines
}

/// The Python environments cached on connected hosts: HOST, ENV (the
/// key's first characters), REQUIREMENTS, SIZE, LAST USED, IN USE (by how
/// many attempts). Empty when no host holds one.
pub fn render_environments_table(hosts: &[HostView]) -> String {
    environments_table_at(hosts, trainyard_proto::now_ms())
}

/// [`render_environments_table`] as seen at `now_ms`.
pub fn environments_table_at(hosts: &[HostView], now_ms: i64) -> String {
    let rows: Vec<Vec<String>> = hosts
        .iter()
        .flat_map(|h| h.environments.iter().map(move |e| (h, e)))
        .map(|(h, e)| {
            let ago = format::span(Some(e.last_used_ms), Some(now_ms)).unwrap_or_default();
            vec![
                h.id.clone(),
                e.key.chars().take(12).collect(),
                e.requirements.join(" "),
                trainyard_proto::resources::memory_text(e.size_bytes),
                format!("{} ago", format::duration(ago)),
                e.in_use.to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    plain(
        &["HOST", "ENV", "REQUIREMENTS", "SIZE", "LAST USED", "IN USE"],
        &[3, 5],
        rows,
    )
}

/// A task's attempts: ATTEMPT, HOST, VERSION (of the adapter), DISPATCHED,
/// STARTED, FINISHED, OUTCOME, ERROR.
pub fn render_attempts_table(attempts: &[Attempt]) -> String {
    let rows = attempts
        .iter()
        .map(|a| {
            vec![
                a.attempt.to_string(),
                match a.slot {
                    Some(slot) => format!("{}/{slot}", a.host),
                    None => a.host.clone(),
                },
                or_dash(a.adapter_version.as_deref()),
                format::timestamp(a.dispatched_at_ms),
                or_dash(a.started_at_ms.map(format::timestamp)),
                or_dash(a.finished_at_ms.map(format::timestamp)),
                or_dash(a.outcome.map(|o| o.as_str())),
                or_dash(a.error.as_deref().map(|e| format::one_line(e, MAX_TEXT))),
            ]
        })
        .collect();
    plain(
        &[
            "ATTEMPT",
            "HOST",
            "VERSION",
            "DISPATCHED",
            "STARTED",
            "FINISHED",
            "OUTCOME",
            "ERROR",
        ],
        &[0],
        rows,
    )
}

/// A borderless table: columns two spaces apart, those in `right` aligned
/// right (figures), no trailing spaces.
pub fn plain(header: &[&str], right: &[usize], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(header.to_vec());
    table.add_rows(rows);
    let last = header.len().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if i == last { 0 } else { 2 }));
        if right.contains(&i) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.trim_fmt()
}

#[cfg(test)]
mod tests;
