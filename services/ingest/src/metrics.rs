//! Ingest metrics: request latency by route and status, produce latency, bytes accepted.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};
use tracing::Instrument as _;

use crate::AppState;

const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The metrics of one ingest process.
#[derive(Debug, Clone)]
pub struct IngestMetrics {
    registry: Registry,
    requests: HistogramVec,
    pub(crate) produce: HistogramVec,
    pub(crate) upload_bytes: IntCounter,
    /// Result-store reads of `?wait=` requests, by what caused them.
    pub(crate) wait_reads: IntCounterVec,
    /// Jobs marked `accepted` after their event's ack (off the request's path), by outcome.
    pub(crate) accept_marks: IntCounterVec,
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
        registry.register(Box::new(accept_marks.clone()))?;
        registry.register(Box::new(wait_reads.clone()))?;
        registry.register(Box::new(docflow_config::telemetry::SPANS_DROPPED.clone()))?;
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
        })
    }

    /// Prometheus text of every metric.
    pub fn render(&self) -> Response {
        docflow_runtime::metrics::render(&self.registry)
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
        .requests
        .with_label_values(&[route.as_str(), resp.status().as_str()])
        .observe(started.elapsed().as_secs_f64());
    resp
}
