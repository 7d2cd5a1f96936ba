//! `docflow-thumbnails`: consumer group `thumbnails` of `doc.uploaded`.
//!
//! For each document it renders the first page (PDF through pdfium, images through `image`)
//! to a PNG that fits in a `--max-px` square, stores it in the object store, records the run
//! in the result store and announces it on `doc.processed`. Delivery is at least once; every
//! effect is keyed by sha256(bytes ‖ stage ‖ version), so a redelivery or a replay with the
//! same stage version costs at most a render, never a second row or event (see [`stage`]).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use docflow_config::{
    ConsumerArgs, DatabaseArgs, KafkaArgs, ObjectStoreArgs, RegistryArgs, TelemetryArgs,
};
use docflow_events::stages::THUMBNAILS;
use docflow_runtime::ConsumerSpec;
use docflow_runtime::admin::{TopicSpec, ensure_topics};
use docflow_store::{Blobs, ResultStore};

pub mod render;
pub mod stage;

pub use render::{RenderError, Renderer, Thumbnail};
pub use stage::{STAGE_VERSION, StageMetrics, Thumbnails};

/// Command line of `docflow-thumbnails`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "docflow-thumbnails",
    version,
    about = "docflow stage: first-page PNG thumbnails"
)]
pub struct Config {
    /// Path of `libpdfium.so` (`make tools` links it under .tools/lib).
    #[arg(
        long,
        env = "DOCFLOW_PDFIUM_LIB",
        default_value = ".tools/lib/libpdfium.so"
    )]
    pub pdfium_lib: PathBuf,

    /// Longest side of a thumbnail, pixels.
    #[arg(long, env = "DOCFLOW_THUMBNAIL_MAX_PX", default_value_t = 256)]
    pub max_px: u32,

    /// Consumer group.
    #[arg(long, env = "DOCFLOW_THUMBNAILS_GROUP", default_value = THUMBNAILS)]
    pub group: String,

    /// Topic of accepted documents.
    #[arg(long, env = "DOCFLOW_THUMBNAILS_TOPIC", default_value = docflow_events::topics::DOC_UPLOADED)]
    pub topic: String,

    /// Topic the stage announces its results on.
    #[arg(long, env = "DOCFLOW_PROCESSED_TOPIC", default_value = docflow_events::topics::DOC_PROCESSED)]
    pub processed_topic: String,

    /// How long a `doc.processed` produce may wait for the broker's ack.
    #[arg(
        long,
        env = "DOCFLOW_THUMBNAILS_PRODUCE_TIMEOUT",
        default_value = "10s",
        value_parser = docflow_config::parse_duration
    )]
    pub produce_timeout: Duration,

    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Consumer runtime (workers, retries, admin endpoint).
    #[command(flatten)]
    pub consumer: ConsumerArgs,

    /// Schema registry.
    #[command(flatten)]
    pub registry: RegistryArgs,

    /// Result store.
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Object store (document bytes in, thumbnails out).
    #[command(flatten)]
    pub objects: ObjectStoreArgs,

    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

impl Config {
    /// The configuration of the stage inside a local stack (`docflow dev`, tests): every
    /// other setting keeps its command-line default, the admin endpoint takes a free port.
    pub fn local(
        bootstrap_servers: &str,
        registry_url: &str,
        database_url: &str,
        object_dir: &std::path::Path,
        pdfium_lib: &std::path::Path,
    ) -> Result<Self, clap::Error> {
        Self::try_parse_from([
            "docflow-thumbnails",
            "--kafka-bootstrap-servers",
            bootstrap_servers,
            "--schema-registry-url",
            registry_url,
            "--database-url",
            database_url,
            "--object-dir",
            &object_dir.display().to_string(),
            "--pdfium-lib",
            &pdfium_lib.display().to_string(),
            "--metrics-listen",
            "127.0.0.1:0",
        ])
    }
}

/// Builds the handler: pdfium, object store, result store (migrated), codec, producer.
pub async fn build(config: &Config, registry: &prometheus::Registry) -> anyhow::Result<Thumbnails> {
    let renderer = Renderer::new(&config.pdfium_lib, config.max_px)?;
    let blobs = Blobs::open(&config.objects.dir)?;
    let pool = docflow_store::open(&config.database.url, config.database.max_connections).await?;
    let results = ResultStore::new(pool);
    let codec = docflow_runtime::codec(&config.registry)?;
    let producer = docflow_runtime::producer::idempotent_producer(
        &config.kafka,
        &format!("docflow-{}", config.group),
    )?;
    Ok(Thumbnails {
        renderer,
        blobs,
        results,
        codec,
        producer,
        processed_topic: config.processed_topic.clone(),
        produce_timeout: config.produce_timeout,
        metrics: StageMetrics::new(registry)?,
    })
}

/// Runs the stage until `shutdown`, then drains in-flight documents and commits.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    let handler = Arc::new(build(&config, &registry).await?);
    if let Err(e) = ensure_topics(
        &config.kafka,
        &[TopicSpec::new(config.processed_topic.clone(), 6)],
        Duration::from_secs(30),
    )
    .await
    {
        tracing::warn!(error = %e, topic = %config.processed_topic, "could not create the results topic; it must exist");
    }
    let spec = ConsumerSpec {
        group_id: config.group.clone(),
        topics: vec![config.topic.clone()],
        client_id: format!("docflow-{}", config.group),
    };
    docflow_runtime::run_service(
        &config.kafka,
        &config.consumer,
        spec,
        handler,
        registry,
        shutdown,
    )
    .await?;
    Ok(())
}

/// Runs the stage until SIGINT/SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    run_until(config, docflow_runtime::shutdown::signal()).await
}
