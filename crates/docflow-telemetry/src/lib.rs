//! Logging, and OpenTelemetry trace export.
//!
//! Logs go to stderr (text or JSON). With `--otlp-endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`)
//! spans are also exported over OTLP/HTTP (protobuf) to `<endpoint>/v1/traces`, batched on
//! an exporter thread of their own behind a bounded queue: a slow or dead collector never
//! blocks or slows the pipeline — spans that find the queue full are dropped and counted
//! in `docflow_otel_spans_dropped_total` (every service's `/metrics` has it).
//!
//! [`shutdown::signal`] is every service's one shutdown story (SIGTERM or SIGINT).

pub mod shutdown;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::Duration;

use clap::{Args, ValueEnum};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    Sampler, SdkTracerProvider, Span, SpanData, SpanExporter, SpanProcessor,
};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// A command's exit: success, or its error on one line with its causes (`{:#}`: anyhow's
/// chain) on stderr, whatever `RUST_BACKTRACE` says: a user error is not a crash (a panic
/// still prints its backtrace).
pub fn exit_code<E: std::fmt::Display>(outcome: Result<(), E>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A duration flag (`250ms`, `5s`, `1m`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Logging and tracing.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info,docflow_runtime=debug`.
    #[arg(long = "log", env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,

    /// Log format.
    #[arg(
        long = "log-format",
        env = "DOCFLOW_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// OTLP/HTTP collector (e.g. `http://otel-collector:4318`); spans go to
    /// `<endpoint>/v1/traces`. Unset: no export.
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// `service.name` of the exported spans (default: the binary's name).
    #[arg(long = "otel-service-name", env = "OTEL_SERVICE_NAME")]
    pub service_name: Option<String>,

    /// Extra resource attributes, `key=value,key=value` (`deployment.environment=prod`).
    #[arg(long = "otel-resource-attributes", env = "OTEL_RESOURCE_ATTRIBUTES")]
    pub resource_attributes: Option<String>,

    /// Fraction of new traces sampled (0–1); a trace continued from a parent follows the
    /// parent's decision.
    #[arg(
        long = "otel-sampling-ratio",
        env = "OTEL_TRACES_SAMPLER_ARG",
        default_value_t = 1.0
    )]
    pub sampling_ratio: f64,

    /// Spans waiting for export at most; beyond it they are dropped (and counted).
    #[arg(
        long = "otel-queue",
        env = "OTEL_BSP_MAX_QUEUE_SIZE",
        default_value_t = 2048
    )]
    pub queue: usize,

    /// Longest wait before a partial batch is exported.
    #[arg(
        long = "otel-export-interval",
        env = "DOCFLOW_OTEL_EXPORT_INTERVAL",
        default_value = "1s",
        value_parser = parse_duration
    )]
    pub export_interval: Duration,
}

/// Telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The log filter does not parse.
    #[error("invalid log filter {filter:?}: {reason}")]
    Filter {
        /// The filter given.
        filter: String,
        /// Parser message.
        reason: String,
    },
    /// A global subscriber was already installed.
    #[error("telemetry already initialised: {0}")]
    AlreadyInit(String),
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter for {endpoint}: {reason}")]
    Exporter {
        /// The endpoint given.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Spans dropped: they found the export queue full (a slow or unreachable collector), or
/// their batch's export failed (refused, unreachable, timed out).
pub static SPANS_DROPPED: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::IntCounter::new(
        "docflow_otel_spans_dropped_total",
        "Spans dropped because the OTLP export queue was full or their batch's export failed",
    )
    .unwrap_or_else(|_| unreachable_counter())
});

/// `IntCounter::new` fails only for invalid names; the name above is valid.
fn unreachable_counter() -> prometheus::IntCounter {
    prometheus::IntCounter::with_opts(prometheus::Opts::new("docflow_otel_spans_dropped", "-"))
        .unwrap_or_else(|_| std::process::abort())
}

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

impl TelemetryArgs {
    /// Installs the global tracing subscriber: logs to stderr, spans to the collector when
    /// one is configured.
    pub fn init(&self) -> Result<(), TelemetryError> {
        let filter = EnvFilter::try_new(&self.log_filter).map_err(|e| TelemetryError::Filter {
            filter: self.log_filter.clone(),
            reason: e.to_string(),
        })?;
        let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let logs: Box<dyn Layer<Registry> + Send + Sync> = match self.log_format {
            LogFormat::Text => fmt.boxed(),
            LogFormat::Json => fmt.json().boxed(),
        };
        let mut layers = vec![logs];
        if let Some(endpoint) = &self.otlp_endpoint {
            let provider = self.provider(endpoint)?;
            let tracer = provider.tracer("docflow");
            layers.push(tracing_opentelemetry::layer().with_tracer(tracer).boxed());
            let _ = PROVIDER.set(provider);
        }
        tracing_subscriber::registry()
            .with(layers)
            .with(filter)
            .try_init()
            .map_err(|e| TelemetryError::AlreadyInit(e.to_string()))?;
        if let Some(endpoint) = &self.otlp_endpoint {
            tracing::info!(
                endpoint,
                ratio = self.sampling_ratio,
                "exporting spans over OTLP/HTTP"
            );
        }
        Ok(())
    }

    fn provider(&self, endpoint: &str) -> Result<SdkTracerProvider, TelemetryError> {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(TelemetryError::Invalid(format!(
                "--otel-sampling-ratio {} is not within 0..=1",
                self.sampling_ratio
            )));
        }
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let exporter_err = |e: &dyn std::fmt::Display| TelemetryError::Exporter {
            endpoint: url.clone(),
            reason: e.to_string(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .with_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| exporter_err(&e))?;
        let name = self.service_name.clone().unwrap_or_else(|| {
            std::env::args()
                .next()
                .and_then(|a| {
                    std::path::Path::new(&a)
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| "docflow".to_owned())
        });
        let mut resource = Resource::builder()
            .with_service_name(name)
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        for pair in self
            .resource_attributes
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter(|p| !p.trim().is_empty())
        {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                TelemetryError::Invalid(format!(
                    "OTEL_RESOURCE_ATTRIBUTES: {pair:?} is not key=value"
                ))
            })?;
            resource =
                resource.with_attribute(KeyValue::new(k.trim().to_owned(), v.trim().to_owned()));
        }
        let processor = BoundedExport::start(exporter, self.queue.max(1), self.export_interval)
            .map_err(|e| exporter_err(&e))?;
        Ok(SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                self.sampling_ratio,
            ))))
            .with_resource(resource.build())
            .build())
    }
}

/// Exports what is queued now and waits for it (at most 5 s); a no-op without export.
/// Services call it when they stop, so the last spans are not lost.
pub fn flush() {
    if let Some(p) = PROVIDER.get() {
        let _ = p.force_flush();
    }
}

enum Msg {
    Span(Box<SpanData>),
    Flush(SyncSender<()>),
    Resource(Box<Resource>),
}

/// A batch span processor with a bounded queue and a thread of its own: `on_end` never
/// blocks (a full queue drops the span and counts it); the thread exports batches of up to
/// 512 spans, or what it has every `interval`.
#[derive(Debug)]
struct BoundedExport {
    tx: SyncSender<Msg>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    closed: AtomicBool,
}

const MAX_BATCH: usize = 512;

impl BoundedExport {
    fn start<E: SpanExporter + 'static>(
        exporter: E,
        queue: usize,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(queue);
        let worker = std::thread::Builder::new()
            .name("docflow-otlp-export".into())
            .spawn(move || export_loop(exporter, &rx, interval))?;
        Ok(BoundedExport {
            tx,
            worker: Mutex::new(Some(worker)),
            closed: AtomicBool::new(false),
        })
    }
}

fn export_loop<E: SpanExporter>(mut exporter: E, rx: &Receiver<Msg>, interval: Duration) {
    let mut batch: Vec<SpanData> = Vec::new();
    // Whether the last export failed: the first failure after a success is logged as a
    // warning, the rest only counted (a dead collector would log every interval).
    let mut failing = false;
    let mut send = |exporter: &E, batch: &mut Vec<SpanData>| {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        match futures::executor::block_on(exporter.export(std::mem::take(batch))) {
            Ok(()) => failing = false,
            Err(e) => {
                SPANS_DROPPED.inc_by(n);
                if failing {
                    tracing::debug!(error = %e, spans = n, "span export failed; the batch is dropped");
                } else {
                    tracing::warn!(error = %e, spans = n, "span export failed; the batch is dropped (counted in docflow_otel_spans_dropped_total; further failures are logged at debug)");
                }
                failing = true;
            }
        }
    };
    // A partial batch waits at most `interval` from its first span, however steadily spans
    // keep arriving.
    let mut due = std::time::Instant::now() + interval;
    loop {
        let wait = due.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(s)) => {
                if batch.is_empty() {
                    due = std::time::Instant::now() + interval;
                }
                batch.push(*s);
                if batch.len() >= MAX_BATCH || std::time::Instant::now() >= due {
                    send(&exporter, &mut batch);
                }
            }
            Ok(Msg::Flush(done)) => {
                send(&exporter, &mut batch);
                let _ = done.send(());
            }
            Ok(Msg::Resource(r)) => exporter.set_resource(&r),
            Err(RecvTimeoutError::Timeout) => {
                send(&exporter, &mut batch);
                due = std::time::Instant::now() + interval;
            }
            Err(RecvTimeoutError::Disconnected) => {
                send(&exporter, &mut batch);
                let _ = exporter.shutdown();
                return;
            }
        }
    }
}

impl SpanProcessor for BoundedExport {
    fn on_start(&self, _span: &mut Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() || self.closed.load(Ordering::Relaxed) {
            return;
        }
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => SPANS_DROPPED.inc(),
        }
    }

    /// Asks the export thread to send what it has and waits up to 5 s in all — never
    /// longer, however stuck the collector (a full queue is retried until then).
    fn force_flush(&self) -> OTelSdkResult {
        const LIMIT: Duration = Duration::from_secs(5);
        let deadline = std::time::Instant::now() + LIMIT;
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        let mut msg = Msg::Flush(done_tx);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
                Err(TrySendError::Full(back)) => {
                    if std::time::Instant::now() >= deadline {
                        return Err(OTelSdkError::Timeout(LIMIT));
                    }
                    msg = back;
                    std::thread::park_timeout(Duration::from_millis(10));
                }
            }
        }
        done_rx
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .map_err(|_| OTelSdkError::Timeout(LIMIT))
    }

    /// The provider's resource (service name, attributes) goes to the exporter, which sends
    /// it with every batch.
    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.tx.try_send(Msg::Resource(Box::new(resource.clone())));
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.closed.store(true, Ordering::Relaxed);
        let flushed = self.force_flush();
        if let Ok(mut w) = self.worker.lock() {
            // The thread ends when the sender goes; it is detached rather than joined past
            // the timeout.
            let _ = w.take();
        }
        let _ = timeout;
        flushed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::Tracer as _;

    /// An exporter that never returns: the collector is dead.
    #[derive(Debug)]
    struct Stuck(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl SpanExporter for Stuck {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.fetch_add(batch.len(), Ordering::Relaxed);
            futures::future::pending::<()>().await;
            Ok(())
        }
    }

    /// The tests that read the process-wide drop counter, one at a time (`cargo test` runs
    /// tests of a binary on threads of one process).
    static COUNTER: Mutex<()> = Mutex::new(());

    /// An exporter whose collector refuses every batch.
    #[derive(Debug)]
    struct Refusing;

    impl SpanExporter for Refusing {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            Err(OTelSdkError::InternalFailure(
                "503 from the collector".into(),
            ))
        }
    }

    #[test]
    fn spans_of_a_failed_export_are_counted_as_dropped() {
        let _one = COUNTER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let processor = BoundedExport::start(Refusing, 64, Duration::from_millis(10)).unwrap();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        let before = SPANS_DROPPED.get();
        for _ in 0..20 {
            tracer.in_span("work", |_| {});
        }
        // The flush returns once the export thread sent (and lost) what it had.
        let _ = provider.force_flush();
        assert_eq!(SPANS_DROPPED.get() - before, 20);
        let _ = provider.shutdown();
    }

    #[test]
    fn a_dead_collector_drops_and_counts_but_never_blocks() {
        let _one = COUNTER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let processor =
            BoundedExport::start(Stuck(seen.clone()), 8, Duration::from_millis(10)).unwrap();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        let before = SPANS_DROPPED.get();
        let started = std::time::Instant::now();
        for _ in 0..10_000 {
            tracer.in_span("work", |_| {});
        }
        // 10,000 spans end at full speed although the exporter is stuck on its first batch.
        assert!(started.elapsed() < Duration::from_secs(5));
        let dropped = SPANS_DROPPED.get() - before;
        assert!(dropped >= 10_000 - 8 - 512, "{dropped}");
        assert!(seen.load(Ordering::Relaxed) <= MAX_BATCH);
        // Shutting down gives up on the stuck collector within its limit.
        let started = std::time::Instant::now();
        assert!(provider.shutdown().is_err());
        assert!(started.elapsed() < Duration::from_secs(7));
    }
}
