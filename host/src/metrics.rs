//! The host's own metrics, served in the Prometheus text format on
//! `host.metrics_listen` when it is set (off by default): how long each call
//! into an adapter takes, why trainers ended, how many attempts run, and
//! how many reports went to the master again.
//!
//! The attempts record into [`HostMetrics`] (prometheus-client's atomic
//! counters and locked histograms, held for a few nanoseconds per call);
//! [`serve`] answers `GET /metrics` from the same registry. Every metric and
//! its labels are listed in docs/operations.md ("Metrics").

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::TcpListener;

/// Bounds (seconds) of the adapter call histogram: a call is a few
/// microseconds of WebAssembly, up to `host.adapter_call_timeout`.
const CALL_SECONDS: &[f64] = &[
    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0,
];

/// The `Content-Type` of the Prometheus text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    adapter: String,
    function: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExitLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaunchLabels {
    path: &'static str,
}

/// The host's metrics. Cheap to clone: every clone records into the same
/// registry.
#[derive(Clone)]
pub struct HostMetrics {
    registry: Arc<Registry>,
    adapter_calls: Family<CallLabels, Histogram>,
    trainer_exits: Family<ExitLabels, Counter>,
    running: Gauge,
    reports_resent: Counter,
    python_env_builds: Counter,
    sandbox_launches: Family<LaunchLabels, Counter>,
    sandboxes_ready: Gauge,
}

impl Default for HostMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("trainyard_host");
        let adapter_calls = Family::<CallLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(CALL_SECONDS.iter().copied())
        });
        registry.register_with_unit(
            "adapter_call_duration",
            "One call into an adapter, by adapter and function (prepare, on-output, finish).",
            Unit::Seconds,
            adapter_calls.clone(),
        );
        let trainer_exits = Family::<ExitLabels, Counter>::default();
        registry.register(
            "trainer_exits",
            "Trainers that ended, by why (see docs/operations.md).",
            trainer_exits.clone(),
        );
        let running = Gauge::default();
        registry.register(
            "attempts_running",
            "Attempts this host holds the lease of and has not yet reported.",
            running.clone(),
        );
        let reports_resent = Counter::default();
        registry.register(
            "reports_resent",
            "Reports sent to the master again because no acknowledgement came (on reconnect and every timers.report_resend_interval).",
            reports_resent.clone(),
        );
        let python_env_builds = Counter::default();
        registry.register(
            "python_env_builds",
            "Python environments this host started to build (one per key, however many attempts waited for it).",
            python_env_builds.clone(),
        );
        let sandbox_launches = Family::<LaunchLabels, Counter>::default();
        registry.register(
            "sandbox_launches",
            "Trainers started, by path: warm (in a sandbox prepared ahead), cold_mismatch (sandboxes were prepared, none with the attempt's grants), cold_unprepared (none prepared yet for its kind).",
            sandbox_launches.clone(),
        );
        let sandboxes_ready = Gauge::default();
        registry.register(
            "sandboxes_ready",
            "Sandboxes prepared ahead and ready for an attempt.",
            sandboxes_ready.clone(),
        );
        Self {
            registry: Arc::new(registry),
            adapter_calls,
            trainer_exits,
            running,
            reports_resent,
            python_env_builds,
            sandbox_launches,
            sandboxes_ready,
        }
    }
}

impl HostMetrics {
    /// Runs one call into an adapter, timing it.
    pub async fn time_call<T>(
        &self,
        adapter: &str,
        function: &'static str,
        call: impl Future<Output = T>,
    ) -> T {
        let started = Instant::now();
        let out = call.await;
        self.adapter_calls
            .get_or_create(&CallLabels {
                adapter: adapter.to_string(),
                function,
            })
            .observe(started.elapsed().as_secs_f64());
        out
    }

    /// A trainer ended, for `reason` (one of a fixed set of words).
    pub fn trainer_exited(&self, reason: &'static str) {
        self.trainer_exits
            .get_or_create(&ExitLabels { reason })
            .inc();
    }

    /// A report went to the master again.
    pub fn report_resent(&self) {
        self.reports_resent.inc();
    }

    /// A Python environment build started.
    pub fn python_env_built(&self) {
        self.python_env_builds.inc();
    }

    /// A trainer was started on `path` (`warm`, `cold_mismatch`,
    /// `cold_unprepared`).
    pub fn sandbox_launched(&self, path: &'static str) {
        self.sandbox_launches
            .get_or_create(&LaunchLabels { path })
            .inc();
    }

    /// How many prepared sandboxes are ready now.
    pub fn sandboxes_ready(&self, ready: usize) {
        self.sandboxes_ready.set(ready as i64);
    }

    /// Counts an attempt as running until the guard is dropped.
    pub fn running(&self) -> RunningGuard {
        self.running.inc();
        RunningGuard(self.running.clone())
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut body, &self.registry)?;
        Ok(body)
    }
}

/// Holds one count of the running-attempts gauge.
pub struct RunningGuard(Gauge);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: HostMetrics) {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move {
                match metrics.render() {
                    Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
                    Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n")
                        .into_response(),
                }
            }
        }),
    );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the metrics listener failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_attempt_no_longer_counts_as_running() {
        let m = HostMetrics::default();
        let a = m.running();
        let b = m.running();
        drop(a);
        assert_eq!(m.running.get(), 1);
        drop(b);
        assert_eq!(m.running.get(), 0);
    }
}
