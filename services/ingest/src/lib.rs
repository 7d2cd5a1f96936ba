//! `docflow-ingest`: the synchronous edge of the pipeline.
//!
//! A request only validates, persists, produces and answers; nothing long runs inside it.
//! `POST /v1/documents` checks the size limit, sniffs the real type from the bytes, checks a
//! PDF's header, trailer and page count, stores the bytes under a server-generated key,
//! records the job, produces `doc.uploaded` (idempotent producer, waits for the ack) and
//! answers `202 Accepted` with the job id (the document id). The same bytes uploaded again
//! return the same job id without new work unless `?reprocess=true`.
//!
//! Order of effects: the blob under its key first (a stage that gets the event finds it);
//! then at once its fsyncs, the job record (`stored`) and the event, the answer waiting for
//! all three. A produce that fails marks the recorded job `produce_failed`; a failure of
//! any of the three answers 503, and the next upload of the same bytes does them again.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use docflow_config::{DatabaseArgs, KafkaArgs, ObjectStoreArgs, RegistryArgs};
use docflow_events::EventCodec;
use docflow_telemetry::TelemetryArgs;
use rdkafka::producer::FutureProducer;
use tokio::net::TcpListener;

mod accepting;
mod admin;
pub mod api;
mod auth;
mod console;
pub mod error;
mod health;
mod jobs;
pub mod metrics;
mod ready;
pub mod routes;
pub mod sniff;
mod timing;
pub mod wakeups;

pub use error::ApiError;

/// Command line of `docflow-ingest`.
#[derive(Debug, Clone, Parser)]
#[command(name = "docflow-ingest", version, about = "docflow upload API")]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "DOCFLOW_INGEST_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Largest accepted document, bytes.
    #[arg(long, env = "DOCFLOW_INGEST_MAX_UPLOAD_BYTES", default_value_t = 50 * 1024 * 1024)]
    pub max_upload_bytes: u64,

    /// Longest a client may take to send a request's headers (also how long an idle
    /// keep-alive connection is kept); slower connections are closed.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_HEADER_TIMEOUT",
        default_value = "10s",
        value_parser = docflow_config::parse_duration
    )]
    pub header_timeout: Duration,

    /// Longest a client may take to send an upload's body; slower uploads get 408.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_BODY_TIMEOUT",
        default_value = "120s",
        value_parser = docflow_config::parse_duration
    )]
    pub body_timeout: Duration,

    /// Uploads received at once, across all clients; past it an upload gets 503 with
    /// Retry-After. Bodies stream to the object store as they arrive, so this bounds open
    /// files and connections, not memory.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_MAX_CONCURRENT_UPLOADS",
        default_value_t = 32
    )]
    pub max_concurrent_uploads: usize,

    /// Most pages a PDF may have.
    #[arg(long, env = "DOCFLOW_INGEST_MAX_PAGES", default_value_t = 2_000)]
    pub max_pages: usize,

    /// PDFs checked at once (each check reads the received file back and may inflate up to
    /// 64 MiB of object streams; 0 = one per CPU).
    #[arg(long, env = "DOCFLOW_INGEST_PDF_CHECKS", default_value_t = 0)]
    pub pdf_checks: usize,

    /// API token and its tenant, `TOKEN=TENANT`; repeatable (env: comma-separated).
    #[arg(
        long = "token",
        env = "DOCFLOW_INGEST_TOKENS",
        value_delimiter = ',',
        value_parser = docflow_config::parse_key_value,
        hide_env_values = true
    )]
    pub tokens: Vec<(String, String)>,

    /// Token of the operators' console and its admin API (`/console`, `/v1/admin/...`);
    /// repeatable (env: comma-separated). Tenants' tokens get 403 there; without an admin
    /// token the admin API answers every request 403.
    #[arg(
        long = "admin-token",
        env = "DOCFLOW_INGEST_ADMIN_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub admin_tokens: Vec<String>,

    /// Consumer groups the console shows, `GROUP[=STAGE][@TOPIC[+TOPIC…]]`: the stage whose
    /// results the group records (default: the group's name) and the topics it reads
    /// (default: `--topic`); repeatable (env: comma-separated). Default: one group per
    /// `--stages`, named after it, and `analytics-rollup` on `--topic` and
    /// `--processed-topic`.
    #[arg(
        long = "console-group",
        env = "DOCFLOW_CONSOLE_GROUPS",
        value_delimiter = ','
    )]
    pub console_groups: Vec<String>,

    /// Topic the consumer replicas report their status to (`--status-topic` of the stages);
    /// the console reads it for paused partitions and records in flight. Empty: not read.
    #[arg(long, env = "DOCFLOW_STATUS_TOPIC", default_value = docflow_config::STATUS_TOPIC)]
    pub status_topic: String,

    /// The console's health verdict per group (Burrow's evaluation of sampled offsets).
    #[command(flatten)]
    pub health: docflow_replay::health::HealthArgs,

    /// How far back the console's lag charts go: each group's lag, sampled every
    /// `--health-interval`, is kept this long in memory and drawn when a page opens.
    #[arg(
        long,
        env = "DOCFLOW_CONSOLE_HISTORY",
        default_value = "1h",
        value_parser = docflow_config::parse_duration
    )]
    pub console_history: Duration,

    /// File of `TOKEN TENANT` lines (`#` comments), read at start.
    #[arg(long, env = "DOCFLOW_INGEST_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,

    /// Object store (document bytes, derived artifacts such as thumbnails).
    #[command(flatten)]
    pub objects: ObjectStoreArgs,

    /// How long a request waits for the broker to acknowledge its event.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_PRODUCE_TIMEOUT",
        default_value = "10s",
        value_parser = docflow_config::parse_duration
    )]
    pub produce_timeout: Duration,

    /// Stages a document goes through (the consumer groups deployed); `GET /v1/jobs` reports
    /// each, and `?wait=` waits for all of them.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_STAGES",
        value_delimiter = ',',
        default_value = "thumbnails"
    )]
    pub stages: Vec<String>,

    /// Longest `?wait=` a request may ask for; longer asks are capped to it.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_MAX_WAIT",
        default_value = "30s",
        value_parser = docflow_config::parse_duration
    )]
    pub max_wait: Duration,

    /// How often a request waiting with `?wait=` reads the result store when no
    /// `doc.processed` announcement woke it (the path for announcements the listener
    /// missed, e.g. while it starts).
    #[arg(
        long,
        env = "DOCFLOW_INGEST_WAIT_POLL",
        default_value = "500ms",
        value_parser = docflow_config::parse_duration
    )]
    pub wait_poll: Duration,

    /// Directory of the embedding model `GET /v1/search` embeds queries with (the one the
    /// ocr-embeddings stage embeds pages with; loaded on the first search).
    #[arg(
        long,
        env = "DOCFLOW_EMBED_MODEL_DIR",
        default_value = ".tools/models/minilm"
    )]
    pub embed_model_dir: PathBuf,

    /// Most chunks of one tenant `GET /v1/search` holds in memory (about 1.5 KiB each); a
    /// tenant with more is searched by the result store's exact scan instead.
    #[arg(
        long,
        env = "DOCFLOW_SEARCH_INDEX_MAX_CHUNKS",
        default_value_t = 1_000_000
    )]
    pub search_index_max_chunks: usize,

    /// Topic of accepted documents.
    #[arg(long, env = "DOCFLOW_INGEST_TOPIC", default_value = docflow_events::topics::DOC_UPLOADED)]
    pub topic: String,

    /// Topic the stages announce results on; each replica reads it (no consumer group) to
    /// wake requests waiting with `?wait=`.
    #[arg(
        long,
        env = "DOCFLOW_INGEST_PROCESSED_TOPIC",
        default_value = docflow_events::topics::DOC_PROCESSED
    )]
    pub processed_topic: String,

    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Schema registry.
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Job records and stage results.
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

impl Config {
    /// The configuration of an ingest API inside a local stack (`docflow dev`, tests,
    /// benchmarks): every other setting keeps its command-line default.
    pub fn local(
        bootstrap_servers: &str,
        registry_url: &str,
        database_url: &str,
        object_dir: &std::path::Path,
        tokens: &[(&str, &str)],
    ) -> Result<Self, clap::Error> {
        let mut args = vec![
            "docflow-ingest".to_owned(),
            "--kafka-bootstrap-servers".to_owned(),
            bootstrap_servers.to_owned(),
            "--schema-registry-url".to_owned(),
            registry_url.to_owned(),
            "--database-url".to_owned(),
            database_url.to_owned(),
            "--object-dir".to_owned(),
            object_dir.display().to_string(),
        ];
        for (token, tenant) in tokens {
            args.push("--token".to_owned());
            args.push(format!("{token}={tenant}"));
        }
        Self::try_parse_from(args)
    }
}

/// Everything a request needs.
pub struct AppState {
    pub(crate) jobs: docflow_store::Jobs,
    pub(crate) results: docflow_store::ResultStore,
    pub(crate) text: docflow_store::TextStore,
    /// The chunk vectors `GET /v1/search` scores, per tenant in memory.
    pub(crate) search: docflow_store::SearchIndex,
    /// The query embedder of `GET /v1/search`, loaded on first use from `embed_model_dir`.
    pub(crate) search_model: tokio::sync::OnceCell<Arc<docflow_embed::Embedder>>,
    pub(crate) embed_model_dir: PathBuf,
    pub(crate) db_tokens: docflow_store::Tokens,
    /// The analytics rollup's counts (`GET /v1/analytics`).
    pub(crate) analytics: docflow_store::Analytics,
    pub(crate) stages: Vec<String>,
    pub(crate) max_wait: Duration,
    pub(crate) wait_poll: Duration,
    pub(crate) blobs: docflow_store::Blobs,
    pub(crate) producer: FutureProducer,
    pub(crate) codec: EventCodec,
    pub(crate) tokens: HashMap<String, String>,
    pub(crate) max_upload_bytes: u64,
    pub(crate) max_pages: usize,
    pub(crate) produce_timeout: Duration,
    pub(crate) topic: String,
    /// Jobs being marked `accepted` after their event's ack; reads of a job wait for it.
    pub(crate) accepting: Arc<accepting::Accepting>,
    /// Requests waiting with `?wait=`, woken by the `doc.processed` listener.
    pub(crate) wakeups: Arc<wakeups::Wakeups>,
    pub(crate) processed_topic: String,
    pub(crate) kafka: KafkaArgs,
    pub(crate) metrics: metrics::IngestMetrics,
    /// Cancelled when shutdown begins: waiting requests answer 202 at once.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    /// One permit per upload being received.
    pub(crate) uploads: Arc<tokio::sync::Semaphore>,
    /// One permit per PDF being checked.
    pub(crate) pdf_checks: tokio::sync::Semaphore,
    /// Whether the last job read or record of an upload failed: while it did, a new
    /// document's job is read before its event is produced (it is skipped for a key that was
    /// free otherwise), so a database outage refuses uploads before their events go out.
    pub(crate) jobs_failing: std::sync::atomic::AtomicBool,
    /// Tokens of the admin API.
    pub(crate) admin_tokens: std::collections::HashSet<String>,
    /// What the console reads from the broker.
    pub(crate) console: console::Console,
    /// The database, for the DLQ redrive the console starts (`docflow replay dlq`'s).
    pub(crate) database: DatabaseArgs,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("object_root", &self.blobs.root())
            .field("tenants", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// Reads `TOKEN TENANT` lines.
fn read_tokens_file(path: &std::path::Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (Some(t), Some(tenant), None) => out.push((t.to_owned(), tenant.to_owned())),
            _ => anyhow::bail!("{}:{}: expected `TOKEN TENANT`", path.display(), n + 1),
        }
    }
    Ok(out)
}

/// Builds the state: database (migrated), object store, producer, codec, tokens.
pub async fn build_state(config: &Config) -> anyhow::Result<Arc<AppState>> {
    let pool = docflow_store::open(&config.database.url, config.database.max_connections).await?;
    let jobs = docflow_store::Jobs::new(pool.clone());
    let results = docflow_store::ResultStore::new(pool.clone());
    let text = docflow_store::TextStore::new(pool.clone());
    let db_tokens = docflow_store::Tokens::new(pool.clone());
    // Empty staged files made ahead of the uploads that take them: making a file is the
    // dearest step of storing a small upload (see `Blobs::keep_spare_files`).
    let blobs = docflow_store::Blobs::open(&config.objects.dir)?.keep_spare_files(SPARE_FILES);
    let mut kafka = config.kafka.clone();
    if !kafka.options.iter().any(|(k, _)| k == "message.timeout.ms") {
        kafka.options.push((
            "message.timeout.ms".into(),
            config.produce_timeout.as_millis().to_string(),
        ));
    }
    let producer = docflow_runtime::producer::request_producer(&kafka, "docflow-ingest")?;
    let codec = docflow_runtime::codec(&config.registry)?;
    let mut tokens: HashMap<String, String> = config.tokens.iter().cloned().collect();
    if let Some(path) = &config.tokens_file {
        tokens.extend(read_tokens_file(path)?);
    }
    let console_groups = if config.console_groups.is_empty() {
        let mut groups = config.stages.clone();
        // The rollup reads uploads and results: its lag on both.
        groups.push(
            docflow_replay::health::GroupSpec::analytics_rollup(
                docflow_store::analytics::LIVE_GROUP,
                &config.topic,
                &config.processed_topic,
            )
            .to_string(),
        );
        groups
    } else {
        config.console_groups.clone()
    };
    if config.admin_tokens.is_empty() {
        tracing::info!(
            "no admin token configured: /v1/admin answers 403 (the console cannot load)"
        );
    }
    if tokens.is_empty() {
        tracing::info!("no API tokens configured: only tokens in the database are accepted");
    }
    Ok(Arc::new(AppState {
        jobs,
        results,
        text,
        search: docflow_store::SearchIndex::new(
            pool.clone(),
            docflow_events::stages::OCR_EMBEDDINGS,
            config.search_index_max_chunks,
        ),
        search_model: tokio::sync::OnceCell::new(),
        embed_model_dir: config.embed_model_dir.clone(),
        db_tokens,
        analytics: docflow_store::Analytics::new(
            pool.clone(),
            docflow_store::analytics::LIVE_GROUP,
        ),
        stages: config.stages.clone(),
        max_wait: config.max_wait,
        wait_poll: config.wait_poll.max(Duration::from_millis(1)),
        blobs,
        producer,
        codec,
        tokens,
        max_upload_bytes: config.max_upload_bytes,
        max_pages: config.max_pages,
        produce_timeout: config.produce_timeout,
        topic: config.topic.clone(),
        accepting: Arc::default(),
        wakeups: Arc::default(),
        processed_topic: config.processed_topic.clone(),
        kafka: config.kafka.clone(),
        metrics: metrics::IngestMetrics::new()?,
        stopping: tokio_util::sync::CancellationToken::new(),
        header_timeout: config.header_timeout,
        body_timeout: config.body_timeout,
        uploads: Arc::new(tokio::sync::Semaphore::new(
            config.max_concurrent_uploads.max(1),
        )),
        jobs_failing: std::sync::atomic::AtomicBool::new(false),
        pdf_checks: tokio::sync::Semaphore::new(match config.pdf_checks {
            0 => std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
            n => n,
        }),
        admin_tokens: config
            .admin_tokens
            .iter()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect(),
        console: console::Console::new(
            &console_groups,
            config.kafka.clone(),
            config.topic.clone(),
            config.status_topic.clone(),
            &config.health,
            config.console_history,
        ),
        database: config.database.clone(),
    }))
}

/// Longest in-flight requests get to finish after the shutdown signal.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// HTTP/1 as ingest serves it: keep-alive, and a clock, so that a client that does not send
/// its headers within `header_timeout` is disconnected (see [`serve`], which also turns off
/// each connection's Nagle delay). The ingest bench serves its HTTP-alone path with it.
pub fn http1(header_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    http
}

/// Serves the API on `listener` until `shutdown`; in-flight requests finish (a request
/// waiting for results with `?wait=` answers 202 with its job id at once), then the producer
/// is flushed.
///
/// Connections are served by hyper directly (not `axum::serve`) to give them a clock: a
/// client that does not send its headers within `--header-timeout` (a slowloris, an idle
/// keep-alive connection) is disconnected, instead of being held forever.
pub async fn serve(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use hyper_util::rt::TokioIo;
    use tower::ServiceExt;

    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "ingest listening");
    }
    let app = routes::router(state.clone());
    let listener_task = tokio::spawn(wakeups::listen(
        state.wakeups.clone(),
        state.kafka.clone(),
        state.processed_topic.clone(),
        state.stopping.clone(),
    ));
    let health_task = tokio::spawn(health::sample(state.clone()));
    let http = http1(state.header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    state.stopping.cancel();
    health_task.abort();
    // It stops at once on cancellation; a blocking look-up in flight is left to finish
    // on its own thread.
    let listener_abort = listener_task.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), listener_task)
        .await
        .is_err()
    {
        tracing::debug!("doc.processed listener still busy at shutdown; aborted");
        listener_abort.abort();
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still running after {DRAIN_TIMEOUT:?}; closing them");
    }
    // No upload is left to take the spare staged files.
    state.blobs.release_spare_files();
    let left = state.accepting.drain(Duration::from_secs(10)).await;
    if left > 0 {
        tracing::warn!(
            left,
            "jobs whose events were acked are not yet marked accepted at shutdown; they stay `stored`"
        );
    }
    let producer = state.producer.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let _ = rdkafka::producer::Producer::flush(&producer, Duration::from_secs(10));
        docflow_telemetry::flush();
    })
    .await;
    Ok(())
}

/// Empty staged files kept ready for uploads (made again as they are taken, a few
/// milliseconds later): enough for a burst of small uploads arriving at once. Public for the
/// benchmark that makes a POST's disk work alone as ingest makes it (`ingest-bench`).
pub const SPARE_FILES: usize = 8;

/// Runs the service until SIGINT/SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let state = build_state(&config).await?;
    let listener = TcpListener::bind(config.listen).await?;
    serve(state, listener, docflow_telemetry::shutdown::signal()).await?;
    Ok(())
}
