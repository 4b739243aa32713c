//! The JSON columns: progress, results, metrics, a host's adapters and
//! capacity, a task's resource request and an attempt's assignment.
//!
//! JSON has no NaN or infinity, and serde_json writes them as `null`, which
//! then does not read back as a number: one diverged training run reporting a
//! NaN loss would make its task unreadable. Non-finite figures are therefore
//! left out when written (and a non-finite episode return becomes absent).

use super::{Result, StoreError};
use crate::model::{Metrics, ProgressView, ResultView};
use serde::de::DeserializeOwned;
use serde::Serialize;
use trainyard_proto::messages::{AdapterInfo, StoredObject};
use trainyard_proto::resources::{Assignment, HostCapacity, ResourceRequest};

fn finite(metrics: &Metrics) -> Metrics {
    metrics
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| StoreError::Encode { what, source })
}

pub(super) fn progress(p: &ProgressView) -> Result<String> {
    let clean = ProgressView {
        metrics: finite(&p.metrics),
        episode_return: p.episode_return.filter(|r| r.is_finite()),
        ..p.clone()
    };
    encode("progress", &clean)
}

pub(super) fn result(r: &ResultView) -> Result<String> {
    let clean = ResultView {
        metrics: finite(&r.metrics),
        ..r.clone()
    };
    encode("result", &clean)
}

pub(super) fn metrics(m: &Metrics) -> Result<String> {
    encode("metrics", &finite(m))
}

pub(super) fn stored_object(o: &StoredObject) -> Result<String> {
    encode("checkpoint object", o)
}

pub(super) fn adapters(a: &[AdapterInfo]) -> Result<String> {
    encode("adapters", &a)
}

/// A request, or `None` (NULL) when it asks for nothing beyond a slot.
pub(super) fn resources(r: &ResourceRequest) -> Result<Option<String>> {
    if r.is_empty() {
        return Ok(None);
    }
    encode("resources", r).map(Some)
}

pub(super) fn assignment(a: &Assignment) -> Result<String> {
    encode("assignment", a)
}

pub(super) fn capacity(c: &HostCapacity) -> Result<String> {
    encode("capacity", c)
}

/// Reads a JSON column of the row named `row` (e.g. `task 17`).
pub(super) fn decode<T: DeserializeOwned>(
    row: impl FnOnce() -> String,
    column: &'static str,
    text: &str,
) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        row: row(),
        column,
        reason: format!("invalid JSON: {e}"),
    })
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn a_nan_metric_does_not_make_progress_unreadable() {
        let p = ProgressView {
            metrics: [("loss".to_string(), f64::NAN), ("reward".to_string(), 1.5)].into(),
            episode_return: Some(f64::INFINITY),
            ..ProgressView::default()
        };
        let back: ProgressView =
            decode(|| "task 1".into(), "progress", &progress(&p).unwrap()).unwrap();
        assert_eq!(back.metrics, [("reward".to_string(), 1.5)].into());
        assert_eq!(back.episode_return, None);
    }
}
