//! How single values read in the operator commands' output: times, spans,
//! figures, byte counts, progress, and free text squeezed onto one line.
//! Plain functions of plain data, so the tables and reports built from them
//! can be tested without a master.

use std::time::{Duration, UNIX_EPOCH};
use trainyard_master::model::{Metrics, ProgressView};

/// What a missing value shows as.
pub const MISSING: &str = "-";

/// The value, or [`MISSING`].
pub fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| MISSING.to_string(), |v| v.to_string())
}

/// A moment as `2024-05-01T12:00:01Z` (UTC).
pub fn timestamp(at_ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(at_ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A moment's time of day, `12:00:01` (UTC), for lines in a log.
pub fn clock(at_ms: i64) -> String {
    let stamp = timestamp(at_ms);
    stamp.get(11..19).unwrap_or(&stamp).to_string()
}

/// The span between two moments, if both are known (never negative).
pub fn span(from_ms: Option<i64>, to_ms: Option<i64>) -> Option<Duration> {
    match (from_ms, to_ms) {
        (Some(from), Some(to)) => Some(Duration::from_millis((to - from).max(0) as u64)),
        _ => None,
    }
}

/// A span in at most two units: `850ms`, `42s`, `3m05s`, `2h07m`, `3d04h`.
pub fn duration(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// A figure with at most three decimals and no trailing zeros: `0.82`, `300`, `-1.5`.
pub fn number(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    match text {
        "-0" => "0".to_string(),
        t => t.to_string(),
    }
}

/// A size in bytes, in binary units: `512 B`, `1.5 KiB`, `20.0 MiB`.
pub fn bytes(n: u64) -> String {
    bytesize::ByteSize::b(n).display().iec().to_string()
}

/// Free text on one line (runs of whitespace, newlines included, become one
/// space), cut to `max` characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if flat.chars().count() > max => format!("{}…", &flat[..cut]),
        _ => flat,
    }
}

/// Episodes done, `120/300` (or `120` when the total is unknown).
pub fn episodes(p: &ProgressView) -> Option<String> {
    match (p.episode, p.total_episodes) {
        (Some(done), Some(total)) => Some(format!("{done}/{total}")),
        (Some(done), None) => Some(done.to_string()),
        (None, _) => None,
    }
}

/// The figure that sums a finished run up: `mean_return` if reported, else
/// the first metric by name.
pub fn final_metric(metrics: &Metrics) -> Option<(String, f64)> {
    metrics
        .get("mean_return")
        .map(|v| ("mean_return".to_string(), *v))
        .or_else(|| metrics.iter().next().map(|(k, v)| (k.clone(), *v)))
}

/// Metrics as `name value, name value`, in name order.
pub fn metrics(metrics: &Metrics) -> String {
    metrics
        .iter()
        .map(|(k, v)| format!("{k} {}", number(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_two_units_at_most() {
        let cases = [
            (Duration::from_millis(850), "850ms"),
            (Duration::from_secs(42), "42s"),
            (Duration::from_secs(185), "3m05s"),
            (Duration::from_secs(2 * 3600 + 7 * 60 + 59), "2h07m"),
            (Duration::from_secs(3 * 86_400 + 4 * 3600), "3d04h"),
        ];
        for (d, shown) in cases {
            assert_eq!(duration(d), shown);
        }
        assert_eq!(span(Some(5_000), Some(1_000)), Some(Duration::ZERO));
        assert_eq!(span(None, Some(1)), None);
    }

    #[test]
    fn figures_drop_trailing_zeros() {
        assert_eq!(number(0.82), "0.82");
        assert_eq!(number(300.0), "300");
        assert_eq!(number(-1.23456), "-1.235");
        assert_eq!(number(-0.0001), "0");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(timestamp(1_700_000_001_000), "2023-11-14T22:13:21Z");
        assert_eq!(clock(1_700_000_001_000), "22:13:21");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(20 << 20), "20.0 MiB");
    }

    #[test]
    fn free_text_is_flattened_and_cut() {
        assert_eq!(
            one_line("Traceback:\n  File \"x\"\n", 100),
            "Traceback: File \"x\""
        );
        assert_eq!(one_line("abcdefgh", 5), "abcd…");
        assert_eq!(one_line("abcde", 5), "abcde");
    }

    #[test]
    fn the_final_metric_prefers_mean_return() {
        let mut m: Metrics = [("episodes".to_string(), 300.0), ("best".to_string(), 1.0)].into();
        assert_eq!(final_metric(&m), Some(("best".to_string(), 1.0)));
        m.insert("mean_return".into(), 0.5);
        assert_eq!(final_metric(&m), Some(("mean_return".to_string(), 0.5)));
        assert_eq!(final_metric(&Metrics::new()), None);
    }
}
