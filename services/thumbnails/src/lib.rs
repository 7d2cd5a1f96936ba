//! `docflow-thumbnails`: consumer group `thumbnails` of `doc.uploaded`.
//!
//! For each document it renders the first page (PDF through pdfium, images through `image`)
//! to a PNG that fits in a `--max-px` square, stores it in the object store, records the run
//! in the result store and announces it on `doc.processed`. Delivery is at least once; every
//! effect is keyed by sha256(bytes ‖ stage ‖ version), so a redelivery or a replay with the
//! same stage version costs at most a render, never a second row or event (see [`stage`]).

use std::future::Future;
use std::path::PathBuf;

use clap::Parser;
use docflow_config::TelemetryArgs;
use docflow_stage::StageArgs;
use docflow_stage::isolate::{IsolationArgs, IsolationError, WorkerInvocation, WorkerPool};

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

    /// Group, topics, Kafka, registry, database, object store, consumer runtime.
    #[command(flatten)]
    pub stage: StageArgs,

    /// Limits of the render worker processes (memory, CPU time, wall-clock time).
    #[command(flatten)]
    pub isolation: IsolationArgs,

    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

impl Config {
    /// The stage inside a local stack (the harness, `docflow dev`): `stage` says where, every
    /// other setting keeps its command-line default.
    pub fn local(stage: StageArgs, pdfium_lib: &std::path::Path) -> Result<Self, clap::Error> {
        let mut config = Self::try_parse_from([
            "docflow-thumbnails",
            "--pdfium-lib",
            &pdfium_lib.display().to_string(),
        ])?;
        config.stage = stage;
        Ok(config)
    }
}

/// The render workers: this binary's worker mode with pdfium from `pdfium_lib`, thumbnails
/// fitting `max_px`, under `isolation`'s limits.
pub fn render_pool(
    pdfium_lib: &std::path::Path,
    max_px: u32,
    isolation: IsolationArgs,
) -> Result<WorkerPool, IsolationError> {
    let worker_args = vec![
        "--pdfium-lib".to_owned(),
        pdfium_lib.display().to_string(),
        "--max-px".to_owned(),
        max_px.to_string(),
    ];
    WorkerPool::new(isolation, worker_args)
}

/// The stage, its metrics registered in `registry`, with one render worker started and
/// probed: a missing pdfium or a bad `--worker-exe` fails here, with the worker's reason,
/// rather than on every document.
pub async fn build(config: &Config, registry: &prometheus::Registry) -> anyhow::Result<Thumbnails> {
    let isolation = config
        .isolation
        .clone()
        .for_workers(config.stage.consumer.workers);
    let pool = render_pool(&config.pdfium_lib, config.max_px, isolation)?;
    pool.run(&probe_png()?)
        .await
        .map_err(|e| anyhow::anyhow!("the render worker does not work: {e}"))?;
    Ok(Thumbnails::new(pool, registry)?)
}

/// Runs the stage until `shutdown`, then drains in-flight documents and commits.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    let stage = build(&config, &registry).await?;
    docflow_stage::run_until(stage, &config.stage, registry, shutdown).await?;
    Ok(())
}

/// A 1 x 1 PNG: the start-up probe of the render workers.
fn probe_png() -> anyhow::Result<Vec<u8>> {
    let mut png = Vec::new();
    image::DynamicImage::new_rgb8(1, 1)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)?;
    Ok(png)
}

/// What a render worker is started with (after the isolation arguments).
#[derive(Debug, Parser)]
#[command(no_binary_name = true)]
struct WorkerConfig {
    #[arg(long)]
    pdfium_lib: PathBuf,
    #[arg(long)]
    max_px: u32,
}

/// The render worker: this binary started by the stage's [`WorkerPool`]. Loads pdfium,
/// limits itself and renders documents from stdin until the stage closes it.
pub fn serve_render_worker(worker: WorkerInvocation) -> anyhow::Result<()> {
    let config = WorkerConfig::try_parse_from(&worker.stage_args)?;
    let renderer = Renderer::new(&config.pdfium_lib, config.max_px)?;
    worker.serve(|bytes| {
        renderer
            .render(bytes)
            .map(|t| stage::encode(&t))
            .map_err(|e| stage::refusal(&e))
    })?;
    Ok(())
}

/// Runs the stage until SIGINT/SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    run_until(config, docflow_runtime::shutdown::signal()).await
}
