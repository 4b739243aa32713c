//! `GET /metrics`: the master's metrics in the Prometheus text format
//! (version 0.0.4), encoded by `prometheus-client`. Open like the other
//! reads.
//!
//! Nothing here waits on the scheduler or the database: the counts, tasks
//! by status among them, come from its last published [`Snapshot`] (see
//! [`crate::scheduler::tally`] and [`crate::scheduler::counts`]). Every
//! metric and its labels are listed in docs/operations.md ("Metrics").

use super::AppState;
use crate::scheduler::tally::{AdapterCounts, Histogram};
use crate::scheduler::Snapshot;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Error;
use std::sync::Arc;

/// The `Content-Type` of the Prometheus text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`.
pub async fn scrape(State(app): State<AppState>) -> Response {
    let Ok(snapshot) = app.scheduler.snapshot() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the scheduler is not running\n",
        )
            .into_response();
    };
    let term = Some(app.store.term());
    match render(MasterScrape { snapshot, term }) {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

/// Encodes one scrape.
pub fn render(scrape: MasterScrape) -> Result<String, Error> {
    let mut registry = Registry::with_prefix("trainyard");
    registry.register_collector(Box::new(scrape));
    let mut body = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut body, &registry)?;
    Ok(body)
}

/// What one scrape shows: the scheduler's last snapshot.
#[derive(Debug)]
pub struct MasterScrape {
    pub snapshot: Arc<Snapshot>,
    /// The term this master leads in (PostgreSQL with standby masters).
    pub term: Option<i64>,
}

impl Collector for MasterScrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), Error> {
        let by_status = (self.snapshot.tasks.iter())
            .map(|(status, n)| ([("status", status.as_str())], gauge(*n)));
        family(&mut encoder, "tasks", "Tasks in each status.", by_status)?;
        self.encode_adapters(&mut encoder)?;
        self.encode_scheduler(&mut encoder)?;
        self.encode_hosts(&mut encoder)?;
        Leadership { term: self.term }.encode(encoder)
    }
}

/// Whether this master leads, and in which term: all a standby's
/// `/metrics` shows, so each master can be scraped on its own.
#[derive(Debug)]
pub struct Leadership {
    /// `None` on a standby; `Some(0)` for a master that elects no leader
    /// (SQLite), which always leads.
    pub term: Option<i64>,
}

impl Collector for Leadership {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), Error> {
        let leading = gauge(u64::from(self.term.is_some()));
        single(
            &mut encoder,
            "master_leading",
            "1 if this master leads (schedules and dispatches), 0 if it stands by.",
            None,
            &leading,
        )?;
        if let Some(term) = self.term {
            let term = gauge(u64::try_from(term).unwrap_or(0));
            single(
                &mut encoder,
                "leader_term",
                "The term this master leads in (0 on SQLite, which elects no leader).",
                None,
                &term,
            )?;
        }
        Ok(())
    }
}

/// `GET /metrics` on a standby.
pub fn render_standby() -> Result<String, Error> {
    let mut registry = Registry::with_prefix("trainyard");
    registry.register_collector(Box::new(Leadership { term: None }));
    let mut body = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut body, &registry)?;
    Ok(body)
}

/// A standby's scrape, in the Prometheus text format.
pub async fn scrape_standby() -> Response {
    match render_standby() {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

impl MasterScrape {
    fn encode_adapters(&self, encoder: &mut DescriptorEncoder) -> Result<(), Error> {
        let adapters = &self.snapshot.tally.adapters;
        let counters: [(&str, &str, PerAdapter); 5] = [
            ("tasks_submitted", "Tasks submitted, by adapter.", |c| {
                c.submitted
            }),
            (
                "tasks_completed",
                "Tasks that ended COMPLETED, by adapter.",
                |c| c.completed,
            ),
            (
                "tasks_failed",
                "Tasks that ended FAILED, by adapter.",
                |c| c.failed,
            ),
            (
                "tasks_cancelled",
                "Tasks that ended CANCELLED, by adapter.",
                |c| c.cancelled,
            ),
            (
                "tasks_retried",
                "Attempts that ended with their task queued again for another, by adapter.",
                |c| c.retried,
            ),
        ];
        for (name, help, value) in counters {
            let by_adapter = adapters
                .iter()
                .map(|(adapter, counts)| ([("adapter", adapter.as_str())], counter(value(counts))));
            family(encoder, name, help, by_adapter)?;
        }
        Ok(())
    }

    fn encode_scheduler(&self, encoder: &mut DescriptorEncoder) -> Result<(), Error> {
        let tally = &self.snapshot.tally;
        let recovery = &self.snapshot.recovery;
        let seconds = Some(&Unit::Seconds);
        let histograms = [
            ("queue_wait", "From entering the queue (submitted or requeued) to dispatch.", seconds, &tally.queue_wait),
            ("submit_to_start", "From submission to the first attempt's start on a host (tasks submitted since the master started).", seconds, &tally.submit_to_start),
            ("scheduler_turn_duration", "One scheduler turn: its commands, sweep, dispatch planning and commit.", seconds, &tally.turn_duration),
            ("scheduler_turn_commands", "Commands (submissions, host messages...) handled in one scheduler turn.", None, &tally.batch_size),
            ("recovery_sweep_duration", "One recovery sweep, from its first Redis request to its last.", seconds, &recovery.durations),
        ];
        for (name, help, unit, histogram) in histograms {
            single(encoder, name, help, unit, &Buckets(histogram))?;
        }
        let overview = &self.snapshot.overview;
        let counters = [
            ("scheduler_turns", "Scheduler turns since start.", overview.turns),
            ("recovery_sweep_redis_round_trips", "Redis requests the recovery sweeps waited for.", recovery.round_trips),
            ("reports_duplicate", "Reports of an attempt already recorded or given up, acknowledged and ignored: sent again by a host that missed the acknowledgement, or the copy in Redis of a report already received.", tally.stale_reports),
            ("lease_renewal_failures", "Attempts recorded LEASE_LOST: their host could not renew the lease and stopped them, or the recovery sweep found the lease lapsed.", tally.lease_lost),
        ];
        for (name, help, value) in counters {
            single(encoder, name, help, None, &counter(value))?;
        }
        single(
            encoder,
            "redis_up",
            "Whether the scheduler's last Redis request succeeded (1) or not (0).",
            None,
            &gauge(u64::from(overview.redis_ok)),
        )
    }

    fn encode_hosts(&self, encoder: &mut DescriptorEncoder) -> Result<(), Error> {
        let hosts = &self.snapshot.hosts;
        let gauges = [
            (
                "hosts_connected",
                "Hosts connected to this master.",
                hosts.len() as u64,
            ),
            (
                "slots",
                "Task slots of the connected hosts.",
                hosts.iter().map(|h| u64::from(h.slots)).sum(),
            ),
            (
                "slots_free",
                "Task slots of the connected hosts that no attempt holds.",
                hosts.iter().map(|h| u64::from(h.free_slots)).sum(),
            ),
        ];
        for (name, help, value) in gauges {
            single(encoder, name, help, None, &gauge(value))?;
        }
        let standing = hosts.iter().map(|h| {
            let state = super::hosts::state_word(&h.standing);
            (
                [("host", h.id.clone()), ("state", state.to_string())],
                gauge(1),
            )
        });
        family(
            encoder,
            "host_standing",
            "Each connected host's standing: open, drained or quarantined (taking no new work but a probe task).",
            standing,
        )?;
        self.encode_quiet(encoder)
    }

    /// Each running attempt's seconds since its last progress, so a hang
    /// shows before its progress timeout (or wall-clock limit) ends it.
    fn encode_quiet(&self, encoder: &mut DescriptorEncoder) -> Result<(), Error> {
        let now_ms = trainyard_proto::now_ms();
        let quiet = self.snapshot.hosts.iter().flat_map(|h| {
            h.running.iter().filter_map(move |r| {
                let since = r.quiet_since_ms?;
                let labels = [
                    ("task", r.task.to_string()),
                    ("attempt", r.attempt.to_string()),
                    ("host", h.id.clone()),
                ];
                Some((
                    labels,
                    gauge(u64::try_from(now_ms - since).unwrap_or(0) / 1000),
                ))
            })
        });
        family(
            encoder,
            "attempt_quiet_seconds",
            "Each running attempt's seconds since its trainer last reported progress (or started), as the master heard it.",
            quiet,
        )
    }
}

/// Reads one count of an adapter's.
type PerAdapter = fn(&AdapterCounts) -> u64;

fn counter(value: u64) -> ConstCounter<u64> {
    ConstCounter::new(value)
}

fn gauge(value: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

/// One metric without labels.
fn single(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: &impl EncodeMetric,
) -> Result<(), Error> {
    let metric_encoder = encoder.encode_descriptor(name, help, unit, metric.metric_type())?;
    metric.encode(metric_encoder)
}

/// One metric with a member per label set; left out when it has none.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    members: impl Iterator<Item = (L, M)>,
) -> Result<(), Error> {
    let mut members = members.peekable();
    let Some((_, first)) = members.peek() else {
        return Ok(());
    };
    let mut metric_encoder = encoder.encode_descriptor(name, help, None, first.metric_type())?;
    for (labels, metric) in members {
        metric.encode(metric_encoder.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A [`Histogram`] of the scheduler's, for the encoder.
#[derive(Debug)]
pub struct Buckets<'a>(pub &'a Histogram);

impl EncodeMetric for Buckets<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), Error> {
        // prometheus-client marks the `+Inf` bucket with `f64::MAX`.
        let buckets: Vec<(f64, u64)> = self
            .0
            .buckets()
            .into_iter()
            .map(|(bound, n)| (if bound.is_finite() { bound } else { f64::MAX }, n))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.0.sum(), self.0.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}
