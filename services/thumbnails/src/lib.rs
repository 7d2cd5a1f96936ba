//! `docflow-thumbnails`: consumer group `thumbnails` of `doc.uploaded`.
//!
//! For each document it renders the first page (PDF through pdfium, images through `image`)
//! to a PNG that fits in a `--max-px` square, stores it in the object store, records the run
//! in the result store and announces it on `doc.processed`. Delivery is at least once; every
//! effect is keyed by sha256(bytes ‖ stage ‖ version), so a redelivery or a replay with the
//! same stage version costs at most a render, never a second row or event (see [`stage`]).

use std::path::PathBuf;

use clap::Parser;
use docflow_stage::isolate::{Isolated, IsolationArgs, Refusal, Reply, StartError, Workers};
use docflow_stage::service::BuildError;
use docflow_stage::{LocalTools, StageArgs, StageService};
use docflow_telemetry::TelemetryArgs;

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

/// What a render worker is started with.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RenderSettings {
    /// Path of `libpdfium.so`.
    pub pdfium_lib: PathBuf,
    /// Longest side of a thumbnail, pixels.
    pub max_px: u32,
}

impl Config {
    /// What this configuration's render workers are started with.
    pub fn render_settings(&self) -> RenderSettings {
        RenderSettings {
            pdfium_lib: self.pdfium_lib.clone(),
            max_px: self.max_px,
        }
    }
}

/// A thumbnail as a worker answers it (the PNG travels as the reply's raw bytes).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Rendered {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Pages of the document.
    pub pages: u32,
}

/// The render worker: this binary started by the stage's [`Workers`]. Loads pdfium and
/// renders one document a job.
#[derive(Debug)]
pub struct RenderWorker(Renderer);

impl Isolated for RenderWorker {
    type Settings = RenderSettings;
    type Answer = Rendered;
    const CLASSES: &'static [&'static str] = stage::REFUSALS;

    fn start(settings: RenderSettings) -> Result<Self, StartError> {
        Ok(RenderWorker(Renderer::new(
            &settings.pdfium_lib,
            settings.max_px,
        )?))
    }

    fn run(&mut self, job: &[u8]) -> Result<Reply<Rendered>, Refusal> {
        let t = self.0.render(job).map_err(|e| stage::refusal(&e))?;
        let rendered = Rendered {
            width: t.width,
            height: t.height,
            pages: t.pages,
        };
        Ok(Reply::new(rendered).with_bytes(t.png))
    }

    /// A 1 x 1 PNG.
    fn probe() -> Vec<u8> {
        let mut png = Vec::new();
        // Encoding a 1 x 1 image into memory cannot fail; an empty probe would be refused.
        let _ = image::DynamicImage::new_rgb8(1, 1)
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png);
        png
    }
}

impl StageService for Thumbnails {
    const BINARY: &'static str = "docflow-thumbnails";
    type Config = Config;
    type Worker = RenderWorker;

    fn stage_args(config: &Config) -> &StageArgs {
        &config.stage
    }

    fn telemetry(config: &Config) -> &TelemetryArgs {
        &config.telemetry
    }

    fn local(stage: StageArgs, tools: &LocalTools) -> Result<Config, clap::Error> {
        let mut config = Config::try_parse_from(["docflow-thumbnails"])?;
        config.pdfium_lib = tools.pdfium_lib.clone();
        config.isolation.worker_exe = tools.worker_exe.clone();
        config.stage = stage;
        Ok(config)
    }

    /// One render worker started and probed: a missing pdfium or a bad `--worker-exe` fails
    /// here, with the worker's reason, rather than on every document.
    async fn build(config: &Config, registry: &prometheus::Registry) -> Result<Self, BuildError> {
        let isolation = config
            .isolation
            .clone()
            .for_workers(config.stage.consumer.workers);
        let workers = Workers::start(isolation, &config.render_settings())
            .await
            .map_err(|e| format!("the render worker does not work: {e}"))?;
        Ok(Thumbnails::new(workers, registry)?)
    }
}
