//! `trainyard progress TASK [--after N] [--limit N] [--csv | --json]`: a
//! task's stored progress curve (`GET /v1/tasks/{id}/progress`), running or
//! finished: one point per line as a table, as CSV (one column per metric)
//! for a spreadsheet or a plotting script, or as the API's page in JSON.
//! Pages like the API: `--after` a point id, at most `--limit` points; when
//! a page is full, stderr says how to ask for the next.

use super::format::{self, or_dash};
use super::table::plain;
use crate::client::{ApiClient, ProgressPoint};
use std::collections::BTreeSet;

#[derive(Debug, Clone, clap::Args)]
pub struct ProgressArgs {
    /// The task whose progress to print
    #[arg(value_name = "TASK")]
    pub id: u64,
    /// Only points after this point id (the first column; 0: from the first)
    #[arg(long, value_name = "POINT", default_value_t = 0)]
    pub after: i64,
    /// At most this many points [default: the master's most, 10000]
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Print CSV: point, attempt, episode, return, time (ms since the epoch)
    /// and a column per metric
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print the master's page as JSON (points and the next cursor)
    #[arg(long)]
    pub json: bool,
}

pub async fn run(client: &ApiClient, args: ProgressArgs) -> anyhow::Result<()> {
    let page = client
        .progress(args.id, Some(args.after), args.limit)
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&page)?);
    } else if args.csv {
        print!("{}", csv(&page.points));
    } else if page.points.is_empty() {
        println!(
            "task {} has no progress points after point {}",
            args.id, args.after
        );
    } else {
        println!("{}", table(&page.points));
    }
    let full = args
        .limit
        .is_some_and(|limit| page.points.len() >= limit as usize);
    if full {
        eprintln!(
            "more may follow: trainyard progress {} --after {}{}",
            args.id,
            page.next,
            args.limit
                .map(|l| format!(" --limit {l}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// One line per point: id, attempt, episode, return, time and metrics.
pub fn table(points: &[ProgressPoint]) -> String {
    let rows = points
        .iter()
        .map(|p| {
            vec![
                p.id.to_string(),
                p.attempt.to_string(),
                or_dash(p.episode),
                or_dash(p.episode_return.map(format::number)),
                format::clock(p.at_ms),
                p.metrics
                    .iter()
                    .map(|(k, v)| format!("{k}={}", format::number(*v)))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]
        })
        .collect();
    plain(
        &["POINT", "ATTEMPT", "EPISODE", "RETURN", "TIME", "METRICS"],
        &[0, 1, 2, 3],
        rows,
    )
}

/// CSV with a header line; a column per metric any point has, empty where
/// a point lacks it.
pub fn csv(points: &[ProgressPoint]) -> String {
    let metrics: BTreeSet<&str> = points
        .iter()
        .flat_map(|p| p.metrics.keys().map(String::as_str))
        .collect();
    let mut header = vec!["point", "attempt", "episode", "return", "at_ms"];
    header.extend(metrics.iter().copied());
    let mut out = header
        .iter()
        .map(|h| csv_field(h))
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for p in points {
        let mut row = vec![
            p.id.to_string(),
            p.attempt.to_string(),
            p.episode.map(|e| e.to_string()).unwrap_or_default(),
            p.episode_return.map(|r| r.to_string()).unwrap_or_default(),
            p.at_ms.to_string(),
        ];
        row.extend(
            metrics
                .iter()
                .map(|m| p.metrics.get(*m).map(|v| v.to_string()).unwrap_or_default()),
        );
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break
/// (RFC 4180). Only metric names can: every other field is a number.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(id: i64, episode: u64, ret: Option<f64>, metrics: &[(&str, f64)]) -> ProgressPoint {
        ProgressPoint {
            id,
            attempt: 1,
            episode: Some(episode),
            episode_return: ret,
            metrics: metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            at_ms: 1_700_000_000_000 + id,
        }
    }

    #[test]
    fn csv_has_a_column_per_metric_and_leaves_missing_values_empty() {
        let points = [
            point(3, 1, Some(0.5), &[("loss", 0.25)]),
            point(7, 2, None, &[("epsilon", 0.9), ("odd,name", 1.0)]),
        ];
        assert_eq!(
            csv(&points),
            "point,attempt,episode,return,at_ms,epsilon,loss,\"odd,name\"\n\
             3,1,1,0.5,1700000000003,,0.25,\n\
             7,1,2,,1700000000007,0.9,,1\n"
        );
        assert_eq!(csv(&[]), "point,attempt,episode,return,at_ms\n");
    }

    #[test]
    fn the_table_shows_one_point_per_line() {
        let text = table(&[
            point(3, 1, Some(0.5), &[("loss", 0.25)]),
            point(7, 2, None, &[]),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("POINT"), "{text}");
        assert!(
            lines[1].contains("loss=0.25") && lines[1].contains("0.5"),
            "{text}"
        );
        assert!(lines[2].trim_start().starts_with('7'), "{text}");
    }
}
