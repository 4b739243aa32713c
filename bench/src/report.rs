//! The benchmark table: one row per figure, with its target and whether the
//! figure met it. A row without a target is information (a breakdown, a
//! comparison figure).

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use std::fmt;
use std::time::Duration;

/// Whether a figure met its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    /// No target: context for the other rows.
    Info,
    /// The benchmark could not run; the figure says why.
    Failed,
}

/// One measured figure.
#[derive(Clone, Debug)]
pub struct Row {
    pub bench: String,
    pub measure: String,
    pub figure: String,
    pub target: String,
    pub verdict: Verdict,
}

impl Row {
    /// A figure with no target.
    pub fn info(bench: &str, measure: impl Into<String>, figure: impl Into<String>) -> Self {
        Self {
            bench: bench.into(),
            measure: measure.into(),
            figure: figure.into(),
            target: String::new(),
            verdict: Verdict::Info,
        }
    }

    /// A figure checked against a target.
    pub fn checked(
        bench: &str,
        measure: impl Into<String>,
        figure: impl Into<String>,
        target: impl Into<String>,
        met: bool,
    ) -> Self {
        Self {
            bench: bench.into(),
            measure: measure.into(),
            figure: figure.into(),
            target: target.into(),
            verdict: if met { Verdict::Met } else { Verdict::Missed },
        }
    }
}

impl Row {
    /// A benchmark (or one of its parts) that could not run.
    pub fn failed(bench: &str, measure: impl Into<String>, error: &anyhow::Error) -> Self {
        Self {
            bench: bench.into(),
            measure: measure.into(),
            figure: format!("could not run: {error:#}"),
            target: String::new(),
            verdict: Verdict::Failed,
        }
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} = {}", self.bench, self.measure, self.figure)?;
        match self.verdict {
            Verdict::Info | Verdict::Failed => Ok(()),
            Verdict::Met => write!(f, " (target {}: met)", self.target),
            Verdict::Missed => write!(f, " (target {}: MISSED)", self.target),
        }
    }
}

fn verdict_text(v: Verdict, smoke: bool) -> &'static str {
    match (v, smoke) {
        (Verdict::Info, _) => "",
        (Verdict::Failed, _) => "FAILED",
        // A smoke run's sizes are too small for a figure to mean anything.
        (_, true) => "(smoke)",
        (Verdict::Met, false) => "yes",
        (Verdict::Missed, false) => "NO",
    }
}

/// The table printed at the end of a run.
pub fn render(rows: &[Row], smoke: bool) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["benchmark", "measure", "figure", "target", "met"]);
    for r in rows {
        table.add_row([
            r.bench.as_str(),
            r.measure.as_str(),
            r.figure.as_str(),
            r.target.as_str(),
            verdict_text(r.verdict, smoke),
        ]);
    }
    table.to_string()
}

/// The same table in Markdown, for `BENCHMARKS.md`.
pub fn markdown(rows: &[Row]) -> String {
    let mut out =
        String::from("| benchmark | measure | figure | target | met |\n|---|---|---|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.bench,
            r.measure,
            r.figure,
            r.target,
            verdict_text(r.verdict, false)
        ));
    }
    out
}

/// The `q` quantile (0..=1) of already sorted values, nearest rank.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Median and p99 of a sample, sorted in place.
pub fn median_p99(values: &mut [f64]) -> Option<(f64, f64)> {
    values.sort_by(|a, b| a.total_cmp(b));
    Some((quantile(values, 0.5)?, quantile(values, 0.99)?))
}

/// A duration in the unit that reads best.
pub fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }

    #[test]
    fn a_smoke_run_claims_no_verdict() {
        let rows = [Row::checked("x", "rate", "1/s", ">= 2/s", false)];
        assert!(render(&rows, true).contains("(smoke)"));
        assert!(render(&rows, false).contains("NO"));
    }
}
