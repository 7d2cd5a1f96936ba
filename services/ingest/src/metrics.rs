//! Ingest metrics: request latency by route and status, produce latency, bytes accepted.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};
use tracing::Instrument as _;

use crate::AppState;

const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How producing `doc.uploaded` ended: the `result` label of
/// `docflow_ingest_produce_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProduceResult {
    /// The broker acknowledged it (`ok`).
    Ok,
    /// It was not produced: encoding, the schema registry, a timeout or the broker (`error`).
    Error,
}

impl ProduceResult {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProduceResult::Ok => "ok",
            ProduceResult::Error => "error",
        }
    }
}

/// What caused a result-store read of a `?wait=` request: the `cause` label of
/// `docflow_ingest_wait_reads_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitCause {
    /// The first read, on arrival (`first`).
    First,
    /// A `doc.processed` announcement woke the request (`event`).
    Event,
    /// The fallback timer (`poll`).
    Poll,
}

impl WaitCause {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitCause::First => "first",
            WaitCause::Event => "event",
            WaitCause::Poll => "poll",
        }
    }
}

/// How marking a job `accepted` ended: the `outcome` label of
/// `docflow_ingest_accept_marks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcceptOutcome {
    /// Marked (`ok`).
    Ok,
    /// Retries exhausted; the job stays `stored` (`error`).
    Error,
}

impl AcceptOutcome {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            AcceptOutcome::Ok => "ok",
            AcceptOutcome::Error => "error",
        }
    }
}

/// The metrics of one ingest process.
///
/// Labelled series are set through its typed methods only (the label values of closed sets
/// are enums: [`ProduceResult`], [`WaitCause`], [`AcceptOutcome`]).
#[derive(Debug, Clone)]
pub struct IngestMetrics {
    registry: Registry,
    requests: HistogramVec,
    produce: HistogramVec,
    pub(crate) upload_bytes: IntCounter,
    /// Result-store reads of `?wait=` requests, by what caused them.
    wait_reads: IntCounterVec,
    /// Jobs marked `accepted` after their event's ack (off the request's path), by outcome.
    accept_marks: IntCounterVec,
    /// Each watched group's health verdict, as Burrow numbers it.
    consumer_status: IntGaugeVec,
}

impl IngestMetrics {
    /// Creates and registers the metrics.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let requests = HistogramVec::new(
            HistogramOpts::new(
                "docflow_ingest_request_duration_seconds",
                "HTTP request latency by route template and status code",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route", "status"],
        )?;
        let produce = HistogramVec::new(
            HistogramOpts::new(
                "docflow_ingest_produce_duration_seconds",
                "Time from send to broker acknowledgement of doc.uploaded, by result",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["result"],
        )?;
        let upload_bytes = IntCounter::new(
            "docflow_ingest_upload_bytes_total",
            "Bytes of documents accepted (stored and produced)",
        )?;
        let wait_reads = IntCounterVec::new(
            Opts::new(
                "docflow_ingest_wait_reads_total",
                "Result-store reads of requests waiting with ?wait=, by cause: first (on arrival), \
                 event (a doc.processed announcement woke it), poll (the fallback timer)",
            ),
            &["cause"],
        )?;
        let accept_marks = IntCounterVec::new(
            Opts::new(
                "docflow_ingest_accept_marks_total",
                "Jobs marked accepted after their doc.uploaded was acked, by outcome (ok, or \
                 error: retries exhausted, the job stays `stored`)",
            ),
            &["outcome"],
        )?;
        let consumer_status = IntGaugeVec::new(
            Opts::new(
                "docflow_consumer_status",
                "Health verdict of each consumer group the console watches, Burrow's numbers: \
                 0 NOTFOUND, 1 OK, 2 WARN (lag not falling), 3 ERR (a partition stopped, \
                 stalled or rewound)",
            ),
            &["group"],
        )?;
        registry.register(Box::new(consumer_status.clone()))?;
        registry.register(Box::new(accept_marks.clone()))?;
        registry.register(Box::new(wait_reads.clone()))?;
        registry.register(Box::new(docflow_telemetry::SPANS_DROPPED.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(produce.clone()))?;
        registry.register(Box::new(upload_bytes.clone()))?;
        Ok(IngestMetrics {
            registry,
            requests,
            produce,
            upload_bytes,
            wait_reads,
            accept_marks,
            consumer_status,
        })
    }

    /// Prometheus text of every metric.
    pub fn render(&self) -> Response {
        docflow_runtime::metrics::render(&self.registry)
    }

    /// Observes one request to `route` (a route template, never a raw path) answered with
    /// `status` after `seconds`.
    fn observe_request(&self, route: &str, status: StatusCode, seconds: f64) {
        self.requests
            .with_label_values(&[route, status.as_str()])
            .observe(seconds);
    }

    /// Observes producing one `doc.uploaded`: `seconds` to `result`.
    pub(crate) fn observe_produce(&self, result: ProduceResult, seconds: f64) {
        self.produce
            .with_label_values(&[result.as_str()])
            .observe(seconds);
    }

    /// Counts one result-store read of a `?wait=` request, by what caused it.
    pub(crate) fn wait_read(&self, cause: WaitCause) {
        self.wait_reads.with_label_values(&[cause.as_str()]).inc();
    }

    /// Sets the health verdict of the watched group `group` (a group named by
    /// `--console-group`: a closed set).
    pub(crate) fn set_consumer_status(&self, group: &str, status: docflow_replay::health::Status) {
        self.consumer_status
            .with_label_values(&[group])
            .set(i64::from(status.level()));
    }

    /// Counts one job marked `accepted` (or given up on) after its event's ack.
    pub(crate) fn accept_mark(&self, outcome: AcceptOutcome) {
        self.accept_marks
            .with_label_values(&[outcome.as_str()])
            .inc();
    }
}

/// Middleware: observes every request under its route template (never the raw path, so job
/// ids do not become labels).
pub(crate) async fn observe(
    State(state): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    // `{method} {route}`, or the method alone for a path no route matched (the conventions).
    let name = match &matched {
        Some(route) => format!("{} {route}", req.method()),
        None => req.method().to_string(),
    };
    let route = matched.unwrap_or_else(|| "unmatched".to_owned());
    // The server span of every request; a caller's `traceparent` makes it a child.
    let span = tracing::info_span!(
        "docflow.http",
        otel.name = %name,
        otel.kind = "server",
        http.request.method = %req.method(),
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        docflow.job_id = tracing::field::Empty,
    );
    // The request's context, once: handlers take it from the extensions (what they produce
    // continues the caller's trace, exported or not).
    let trace = docflow_runtime::trace::TraceContext::from_header(
        req.headers().get("traceparent").map(|v| v.as_bytes()),
    );
    if trace.parent_span_id.is_some() {
        let _ = docflow_runtime::trace::adopt(&span, trace);
    }
    req.extensions_mut().insert(trace);
    let started = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", resp.status().as_u16());
    state
        .metrics
        .observe_request(&route, resp.status(), started.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a sample line of series `name` carries every one of `labels`.
    fn has(text: &str, name: &str, labels: &[&str]) -> bool {
        let prefix = format!("{name}{{");
        text.lines()
            .filter(|l| l.starts_with(&prefix))
            .any(|l| labels.iter().all(|label| l.contains(label)))
    }

    #[test]
    fn typed_series_keep_their_names_and_label_values() {
        let m = IngestMetrics::new().unwrap();
        m.observe_request("/v1/documents", StatusCode::ACCEPTED, 0.1);
        let results = [(ProduceResult::Ok, "ok"), (ProduceResult::Error, "error")];
        for (r, label) in results {
            assert_eq!(r.as_str(), label);
            m.observe_produce(r, 0.1);
        }
        let causes = [
            (WaitCause::First, "first"),
            (WaitCause::Event, "event"),
            (WaitCause::Poll, "poll"),
        ];
        for (c, label) in causes {
            assert_eq!(c.as_str(), label);
            m.wait_read(c);
        }
        let marks = [(AcceptOutcome::Ok, "ok"), (AcceptOutcome::Error, "error")];
        for (o, label) in marks {
            assert_eq!(o.as_str(), label);
            m.accept_mark(o);
        }

        let t = docflow_runtime::metrics::text(&m.registry).unwrap();
        assert!(
            has(
                &t,
                "docflow_ingest_request_duration_seconds_count",
                &["route=\"/v1/documents\"", "status=\"202\""]
            ),
            "{t}"
        );
        for (_, label) in results {
            let result = format!("result=\"{label}\"");
            assert!(
                has(
                    &t,
                    "docflow_ingest_produce_duration_seconds_count",
                    &[result.as_str()]
                ),
                "{t}"
            );
        }
        for (_, label) in causes {
            let cause = format!("cause=\"{label}\"");
            assert!(
                has(&t, "docflow_ingest_wait_reads_total", &[cause.as_str()]),
                "{t}"
            );
        }
        for (_, label) in marks {
            let outcome = format!("outcome=\"{label}\"");
            assert!(
                has(&t, "docflow_ingest_accept_marks_total", &[outcome.as_str()]),
                "{t}"
            );
        }
    }
}
