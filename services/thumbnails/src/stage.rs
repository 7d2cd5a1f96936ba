//! The `thumbnails` stage: the first page of a document as a PNG that fits in `--max-px`.
//! Everything around it (decode, done-check, blob and digest checks, recording,
//! `doc.processed`, dead letters) is the stage layer's ([`docflow_stage`]).

use docflow_events::stages::THUMBNAILS;
use docflow_runtime::HandlerError;
use docflow_stage::{Document, Output, Stage};
use prometheus::{HistogramOpts, HistogramVec, Registry};
use serde_json::json;

use crate::render::{RenderError, Renderer};

/// Version of the thumbnail logic. Bump it when the output changes (size, renderer fix):
/// replayed documents then get new rows and new keys instead of being skipped as done.
pub const STAGE_VERSION: i32 = 1;

/// The DLQ error classes of this stage (besides the layer's and the runtime's).
pub mod class {
    /// The PDF or image is corrupt, encrypted or has no pages.
    pub const UNRENDERABLE: &str = "unrenderable";
    /// Not a PDF, PNG, JPEG or TIFF.
    pub const UNSUPPORTED_TYPE: &str = "unsupported_type";
    /// libpdfium could not be used.
    pub const PDFIUM: &str = "pdfium";
    /// The image's header announces more pixels than a page can have.
    pub const OVER_LIMITS: &str = "over_limits";
    /// The renderer panicked.
    pub const RENDER_PANIC: &str = "render_panic";
}

/// Stage metrics (the runtime's consumer metrics cover delivery, retries and lag).
#[derive(Debug, Clone)]
pub struct StageMetrics {
    render: HistogramVec,
}

impl StageMetrics {
    /// Registers `docflow_thumbnail_render_seconds{outcome}` in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let render = HistogramVec::new(
            HistogramOpts::new(
                "docflow_thumbnail_render_seconds",
                "Time to render one first-page thumbnail, by outcome (ok, unrenderable)",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["outcome"],
        )?;
        registry.register(Box::new(render.clone()))?;
        Ok(StageMetrics { render })
    }
}

/// The rendering of stage `thumbnails`.
#[derive(Debug)]
pub struct Thumbnails {
    pub(crate) renderer: Renderer,
    pub(crate) metrics: StageMetrics,
}

impl Thumbnails {
    /// The stage with `renderer`, its metrics registered in `registry`.
    pub fn new(renderer: Renderer, registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(Thumbnails {
            renderer,
            metrics: StageMetrics::new(registry)?,
        })
    }
}

impl Stage for Thumbnails {
    const NAME: &'static str = THUMBNAILS;
    const VERSION: i32 = STAGE_VERSION;

    async fn process(&self, doc: &Document) -> Result<Output, HandlerError> {
        let (renderer, bytes) = (self.renderer, doc.bytes.clone());
        let clock = std::time::Instant::now();
        let rendered = tokio::task::spawn_blocking(move || renderer.render(&bytes))
            .await
            .map_err(|e| HandlerError::permanent(class::RENDER_PANIC, e))?;
        let elapsed = clock.elapsed().as_secs_f64();
        let thumb = match rendered {
            Ok(t) => t,
            Err(e) => {
                self.metrics
                    .render
                    .with_label_values(&["unrenderable"])
                    .observe(elapsed);
                let class = match e {
                    RenderError::Unsupported => class::UNSUPPORTED_TYPE,
                    RenderError::Library { .. } => class::PDFIUM,
                    RenderError::Pdf(_) | RenderError::Image(_) => class::UNRENDERABLE,
                    RenderError::TooLarge { .. } => class::OVER_LIMITS,
                };
                return Err(HandlerError::permanent(class, e));
            }
        };
        self.metrics
            .render
            .with_label_values(&["ok"])
            .observe(elapsed);
        let (width, height, pages) = (thumb.width, thumb.height, thumb.pages);
        tracing::debug!(
            document = %doc.event.document_id,
            width,
            height,
            pages,
            render_ms = (elapsed * 1000.0).round(),
            "thumbnail rendered"
        );
        let summary = json!({
            "width": width, "height": height, "pages": pages, "png_bytes": thumb.png.len()
        });
        Ok(Output::default()
            .artifact("png", thumb.png)
            .summary(summary))
    }
}
