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

/// Runs the stage until `shutdown`, then drains in-flight documents and commits.
pub async fn run_until(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    let renderer = Renderer::new(&config.pdfium_lib, config.max_px)?;
    let stage = Thumbnails::new(renderer, &registry)?;
    docflow_stage::run_until(stage, &config.stage, registry, shutdown).await?;
    Ok(())
}

/// Runs the stage until SIGINT/SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    run_until(config, docflow_runtime::shutdown::signal()).await
}
