//! Consumer metrics (Prometheus) and the admin endpoint that serves them.
//!
//! Names carry units; labels are low-cardinality: group, topic, partition (bounded by the
//! partition count) and a fixed outcome or kind. Error text is never a label.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::RuntimeError;

/// Outcome label values of `docflow_consumer_messages_total`.
pub mod outcome {
    /// The handler succeeded.
    pub const OK: &str = "ok";
    /// A transient failure that will be retried.
    pub const RETRIED: &str = "retried";
    /// Written to the dead-letter topic.
    pub const DEAD_LETTERED: &str = "dead_lettered";
    /// Given up on at revoke or shutdown; will be redelivered.
    pub const ABANDONED: &str = "abandoned";
    /// Its handler stopped mid-run when the shutdown grace period ran out; its delivery
    /// claim released (an interruption, not a death); will be redelivered.
    pub const INTERRUPTED: &str = "interrupted";
    /// A dead letter redriven for another group: passed by unhandled.
    pub const OTHER_GROUP: &str = "other_group";
}

/// Every metric a consumer group exports.
#[derive(Debug, Clone)]
pub struct ConsumerMetrics {
    pub(crate) lag_records: IntGaugeVec,
    pub(crate) lag_seconds: GaugeVec,
    pub(crate) messages: IntCounterVec,
    pub(crate) suspects: IntCounterVec,
    pub(crate) handler_duration: HistogramVec,
    pub(crate) in_flight: IntGaugeVec,
    pub(crate) paused_partitions: IntGaugeVec,
    pub(crate) assigned_partitions: IntGaugeVec,
    pub(crate) rebalances: IntCounterVec,
    pub(crate) dlq_write_errors: IntCounterVec,
    pub(crate) status_reports: IntCounterVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    m: Result<T, prometheus::Error>,
) -> Result<T, RuntimeError> {
    let m = m.map_err(RuntimeError::Metrics)?;
    registry
        .register(Box::new(m.clone()))
        .map_err(RuntimeError::Metrics)?;
    Ok(m)
}

impl ConsumerMetrics {
    /// Creates and registers the metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, RuntimeError> {
        let tp = &["group", "topic", "partition"];
        Ok(ConsumerMetrics {
            lag_records: reg(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "docflow_consumer_lag_records",
                        "Records between the committed watermark and the log end, per partition",
                    ),
                    tp,
                ),
            )?,
            lag_seconds: reg(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "docflow_consumer_lag_seconds",
                        "Age of the oldest record not yet done, per partition",
                    ),
                    tp,
                ),
            )?,
            messages: reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_messages_total",
                        "Records by outcome: ok, retried, dead_lettered, abandoned",
                    ),
                    &["group", "outcome"],
                ),
            )?,
            suspects: reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_suspect_runs_total",
                        "Records run alone because a process died with them in hand",
                    ),
                    &["group"],
                ),
            )?,
            handler_duration: reg(
                registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "docflow_consumer_handler_duration_seconds",
                        "Wall time of one handler attempt",
                    )
                    .buckets(vec![
                        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                        60.0, 120.0, 300.0,
                    ]),
                    &["group"],
                ),
            )?,
            in_flight: reg(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "docflow_consumer_in_flight_records",
                        "Records dispatched and not finished (running, retrying or queued)",
                    ),
                    &["group"],
                ),
            )?,
            paused_partitions: reg(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "docflow_consumer_paused_partitions",
                        "Assigned partitions paused because the replica is at capacity",
                    ),
                    &["group"],
                ),
            )?,
            assigned_partitions: reg(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "docflow_consumer_assigned_partitions",
                        "Partitions assigned to this replica",
                    ),
                    &["group"],
                ),
            )?,
            rebalances: reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_rebalances_total",
                        "Rebalance callbacks by kind: assign, revoke, lost",
                    ),
                    &["group", "kind"],
                ),
            )?,
            status_reports: reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_status_reports_total",
                        "Status reports to --status-topic by outcome: sent, failed",
                    ),
                    &["group", "outcome"],
                ),
            )?,
            dlq_write_errors: reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_dlq_write_errors_total",
                        "Failed attempts to write a dead letter (the partition waits)",
                    ),
                    &["group"],
                ),
            )?,
        })
    }
}

/// Liveness and readiness of a service, shared with its admin endpoint.
#[derive(Debug, Default)]
pub struct Health {
    last_poll_ms: AtomicI64,
    ready: AtomicBool,
}

/// A poll loop that has not polled for this long is reported unhealthy.
const STALL_MS: i64 = 30_000;

/// Wall-clock time, Unix milliseconds (0 before 1970, saturating far in the future).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Health {
    /// Records a poll now.
    pub fn polled(&self) {
        self.last_poll_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Sets readiness.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the poll loop polled recently.
    pub fn is_live(&self) -> bool {
        now_ms() - self.last_poll_ms.load(Ordering::Relaxed) < STALL_MS
    }

    /// Whether the service takes work.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.is_live()
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Registry,
    health: Arc<Health>,
}

/// Serves `/metrics` (Prometheus text), `/healthz` and `/readyz` on `listener`.
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    registry: Registry,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route(
            "/healthz",
            get(|State(s): State<AdminState>| async move {
                if s.health.is_live() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "poll loop stalled")
                }
            }),
        )
        .route(
            "/readyz",
            get(|State(s): State<AdminState>| async move {
                if s.health.is_ready() {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .with_state(AdminState { registry, health });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the admin endpoint address.
pub async fn bind_admin(addr: SocketAddr) -> Result<tokio::net::TcpListener, RuntimeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(RuntimeError::io(format!("binding admin endpoint {addr}")))
}

async fn metrics(State(s): State<AdminState>) -> Response {
    render(&s.registry)
}

/// `registry` as a Prometheus text-format response (every docflow `/metrics` endpoint).
pub fn render(registry: &Registry) -> Response {
    let mut buf = Vec::new();
    let enc = TextEncoder::new();
    match enc.encode(&registry.gather(), &mut buf) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, enc.format_type().to_owned())],
            buf,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}
