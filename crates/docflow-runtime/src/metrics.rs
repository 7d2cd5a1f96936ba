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

/// How a record ended: the `outcome` label of `docflow_consumer_messages_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageOutcome {
    /// The handler succeeded ([`outcome::OK`]).
    Ok,
    /// A transient failure that will be retried ([`outcome::RETRIED`]).
    Retried,
    /// Written to the dead-letter topic ([`outcome::DEAD_LETTERED`]).
    DeadLettered,
    /// Given up on at revoke or shutdown; will be redelivered ([`outcome::ABANDONED`]).
    Abandoned,
    /// Its handler stopped mid-run when the shutdown grace period ran out
    /// ([`outcome::INTERRUPTED`]).
    Interrupted,
    /// A dead letter redriven for another group, passed by unhandled
    /// ([`outcome::OTHER_GROUP`]).
    OtherGroup,
}

impl MessageOutcome {
    /// The label value (one of [`outcome`]'s constants).
    pub const fn as_str(self) -> &'static str {
        match self {
            MessageOutcome::Ok => outcome::OK,
            MessageOutcome::Retried => outcome::RETRIED,
            MessageOutcome::DeadLettered => outcome::DEAD_LETTERED,
            MessageOutcome::Abandoned => outcome::ABANDONED,
            MessageOutcome::Interrupted => outcome::INTERRUPTED,
            MessageOutcome::OtherGroup => outcome::OTHER_GROUP,
        }
    }
}

/// A rebalance callback: the `kind` label of `docflow_consumer_rebalances_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RebalanceKind {
    /// Partitions assigned (`assign`).
    Assign,
    /// Partitions revoked in an orderly rebalance (`revoke`).
    Revoke,
    /// Partitions lost: the group moved on without this replica (`lost`).
    Lost,
}

impl RebalanceKind {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            RebalanceKind::Assign => "assign",
            RebalanceKind::Revoke => "revoke",
            RebalanceKind::Lost => "lost",
        }
    }
}

/// What became of a status report: the `outcome` label of
/// `docflow_consumer_status_reports_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusReportOutcome {
    /// The broker acknowledged it (`sent`).
    Sent,
    /// It could not be queued or was not delivered (`failed`).
    Failed,
}

impl StatusReportOutcome {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            StatusReportOutcome::Sent => "sent",
            StatusReportOutcome::Failed => "failed",
        }
    }
}

/// `docflow_consumer_status_reports_total{group, outcome}`, on its own so the status
/// reporter can keep it (its reports are counted on tasks of their own).
#[derive(Debug, Clone)]
pub(crate) struct StatusReports(IntCounterVec);

impl StatusReports {
    /// Counts one report of `group` that ended with `outcome`.
    pub(crate) fn count(&self, group: &str, outcome: StatusReportOutcome) {
        self.0.with_label_values(&[group, outcome.as_str()]).inc();
    }
}

/// Every metric a consumer group exports.
///
/// The series are set through its typed methods only (the label values of closed sets are
/// enums: [`MessageOutcome`], [`RebalanceKind`], [`StatusReportOutcome`]).
#[derive(Debug, Clone)]
pub struct ConsumerMetrics {
    lag_records: IntGaugeVec,
    lag_seconds: GaugeVec,
    messages: IntCounterVec,
    suspects: IntCounterVec,
    handler_duration: HistogramVec,
    in_flight: IntGaugeVec,
    paused_partitions: IntGaugeVec,
    assigned_partitions: IntGaugeVec,
    rebalances: IntCounterVec,
    commits: IntCounterVec,
    dlq_write_errors: IntCounterVec,
    pub(crate) status_reports: StatusReports,
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
            commits: reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_commits_total",
                        "Offset commits to Kafka by result: ok, failed",
                    ),
                    &["group", "result"],
                ),
            )?,
            status_reports: StatusReports(reg(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "docflow_consumer_status_reports_total",
                        "Status reports to --status-topic by outcome: sent, failed",
                    ),
                    &["group", "outcome"],
                ),
            )?),
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

    /// Counts one record of `group` that ended with `outcome`.
    pub(crate) fn message(&self, group: &str, outcome: MessageOutcome) {
        self.messages
            .with_label_values(&[group, outcome.as_str()])
            .inc();
    }

    /// Counts a record of `group` run alone (a process died with it in hand).
    pub(crate) fn suspect_run(&self, group: &str) {
        self.suspects.with_label_values(&[group]).inc();
    }

    /// Observes the wall time of one handler attempt of `group`.
    pub(crate) fn observe_handler(&self, group: &str, seconds: f64) {
        self.handler_duration
            .with_label_values(&[group])
            .observe(seconds);
    }

    /// Sets the records of `group` dispatched and not finished.
    pub(crate) fn set_in_flight(&self, group: &str, records: usize) {
        self.in_flight
            .with_label_values(&[group])
            .set(gauge(records));
    }

    /// Sets the partitions of `group` paused at capacity (0: resumed).
    pub(crate) fn set_paused_partitions(&self, group: &str, partitions: usize) {
        self.paused_partitions
            .with_label_values(&[group])
            .set(gauge(partitions));
    }

    /// Sets the partitions assigned to this replica of `group`.
    pub(crate) fn set_assigned_partitions(&self, group: &str, partitions: usize) {
        self.assigned_partitions
            .with_label_values(&[group])
            .set(gauge(partitions));
    }

    /// Sets the lag of one partition: `records` (when known) behind the log end, the
    /// oldest record not yet done `seconds` old.
    pub(crate) fn set_partition_lag(
        &self,
        group: &str,
        topic: &str,
        partition: i32,
        records: Option<i64>,
        seconds: f64,
    ) {
        let p = partition.to_string();
        let labels = [group, topic, p.as_str()];
        if let Some(lag) = records {
            self.lag_records.with_label_values(&labels).set(lag);
        }
        self.lag_seconds.with_label_values(&labels).set(seconds);
    }

    /// Drops the lag series of a partition no longer owned.
    pub(crate) fn forget_partition(&self, group: &str, topic: &str, partition: i32) {
        let p = partition.to_string();
        let labels = [group, topic, p.as_str()];
        let _ = self.lag_records.remove_label_values(&labels);
        let _ = self.lag_seconds.remove_label_values(&labels);
    }

    /// Counts a rebalance callback of `group`.
    pub(crate) fn rebalance(&self, group: &str, kind: RebalanceKind) {
        self.rebalances
            .with_label_values(&[group, kind.as_str()])
            .inc();
    }

    /// Counts an offset commit of `group` that ended `ok` or `failed`.
    pub(crate) fn commit(&self, group: &str, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.commits.with_label_values(&[group, result]).inc();
    }

    /// Counts a failed attempt to write a dead letter of `group`.
    pub(crate) fn dlq_write_error(&self, group: &str) {
        self.dlq_write_errors.with_label_values(&[group]).inc();
    }
}

/// A count as a gauge value (saturating).
fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
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

/// `registry` in Prometheus' text format (what every docflow `/metrics` endpoint serves).
pub fn text(registry: &Registry) -> Result<String, prometheus::Error> {
    let mut buf = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut buf)?;
    String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

/// `registry` as a Prometheus text-format response (every docflow `/metrics` endpoint).
pub fn render(registry: &Registry) -> Response {
    match text(registry) {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                TextEncoder::new().format_type().to_owned(),
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample lines of series `name`.
    fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        let prefix = format!("{name}{{");
        text.lines().filter(|l| l.starts_with(&prefix)).collect()
    }

    fn has(text: &str, name: &str, labels: &[&str]) -> bool {
        series(text, name)
            .iter()
            .any(|l| labels.iter().all(|label| l.contains(label)))
    }

    #[test]
    fn typed_series_keep_their_names_and_label_values() {
        let registry = Registry::new();
        let m = ConsumerMetrics::new(&registry).unwrap();
        let outcomes = [
            (MessageOutcome::Ok, "ok"),
            (MessageOutcome::Retried, "retried"),
            (MessageOutcome::DeadLettered, "dead_lettered"),
            (MessageOutcome::Abandoned, "abandoned"),
            (MessageOutcome::Interrupted, "interrupted"),
            (MessageOutcome::OtherGroup, "other_group"),
        ];
        for (o, label) in outcomes {
            assert_eq!(o.as_str(), label);
            m.message("g", o);
        }
        let kinds = [
            (RebalanceKind::Assign, "assign"),
            (RebalanceKind::Revoke, "revoke"),
            (RebalanceKind::Lost, "lost"),
        ];
        for (k, label) in kinds {
            assert_eq!(k.as_str(), label);
            m.rebalance("g", k);
        }
        let reports = [
            (StatusReportOutcome::Sent, "sent"),
            (StatusReportOutcome::Failed, "failed"),
        ];
        for (o, label) in reports {
            assert_eq!(o.as_str(), label);
            m.status_reports.count("g", o);
        }
        m.suspect_run("g");
        m.observe_handler("g", 0.5);
        m.set_in_flight("g", 3);
        m.set_paused_partitions("g", 1);
        m.set_assigned_partitions("g", 2);
        m.set_partition_lag("g", "t", 7, Some(5), 1.5);
        m.dlq_write_error("g");

        let t = text(&registry).unwrap();
        let g = "group=\"g\"";
        for (_, label) in outcomes {
            let outcome = format!("outcome=\"{label}\"");
            assert!(
                has(
                    &t,
                    "docflow_consumer_messages_total",
                    &[g, outcome.as_str()]
                ),
                "{t}"
            );
        }
        for (_, label) in kinds {
            let kind = format!("kind=\"{label}\"");
            assert!(
                has(&t, "docflow_consumer_rebalances_total", &[g, kind.as_str()]),
                "{t}"
            );
        }
        for (_, label) in reports {
            let outcome = format!("outcome=\"{label}\"");
            assert!(
                has(
                    &t,
                    "docflow_consumer_status_reports_total",
                    &[g, outcome.as_str()]
                ),
                "{t}"
            );
        }
        for name in [
            "docflow_consumer_suspect_runs_total",
            "docflow_consumer_handler_duration_seconds_count",
            "docflow_consumer_in_flight_records",
            "docflow_consumer_paused_partitions",
            "docflow_consumer_assigned_partitions",
            "docflow_consumer_dlq_write_errors_total",
        ] {
            assert!(has(&t, name, &[g]), "{name}\n{t}");
        }
        let tp = [g, "topic=\"t\"", "partition=\"7\""];
        assert!(has(&t, "docflow_consumer_lag_records", &tp), "{t}");
        assert!(has(&t, "docflow_consumer_lag_seconds", &tp), "{t}");

        m.forget_partition("g", "t", 7);
        let t = text(&registry).unwrap();
        assert!(series(&t, "docflow_consumer_lag_records").is_empty(), "{t}");
        assert!(series(&t, "docflow_consumer_lag_seconds").is_empty(), "{t}");
    }
}
