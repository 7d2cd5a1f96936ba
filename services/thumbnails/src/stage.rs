//! The `thumbnails` stage: the first page of a document as a PNG that fits in `--max-px`.
//! Everything around it (decode, done-check, blob and digest checks, recording,
//! `doc.processed`, dead letters) is the stage layer's ([`docflow_stage`]).

use docflow_events::stages::THUMBNAILS;
use docflow_runtime::HandlerError;
use docflow_stage::{Document, Output, Stage};
use prometheus::{HistogramOpts, HistogramVec, Registry};
use serde_json::json;

use docflow_stage::isolate::{IsolationError, WorkerPool};

use crate::render::{RenderError, Thumbnail};
use docflow_stage::media::MediaError;

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
    /// The renderer answered something unreadable.
    pub const RENDER_PANIC: &str = "render_panic";
    // The isolation classes (`memory_limit`, `timeout`, `stalled`, `worker_crashed`) come from
    // `docflow_stage::isolate::IsolationError::class`.
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
                "Time to render one first-page thumbnail, by outcome (ok, unrenderable, killed)",
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

/// The rendering of stage `thumbnails`: each document is rendered in an isolated worker
/// process ([`docflow_stage::isolate`]), so a PDF that makes pdfium allocate without end,
/// spin or crash costs one worker, never the stage, and one slow PDF does not hold pdfium's
/// process-wide lock for the others.
#[derive(Debug)]
pub struct Thumbnails {
    pub(crate) pool: WorkerPool,
    pub(crate) metrics: StageMetrics,
}

impl Thumbnails {
    /// The stage rendering in `pool`'s workers, its metrics registered in `registry`.
    pub fn new(pool: WorkerPool, registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(Thumbnails {
            pool,
            metrics: StageMetrics::new(registry)?,
        })
    }

    fn observe(&self, outcome: &str, seconds: f64) {
        self.metrics
            .render
            .with_label_values(&[outcome])
            .observe(seconds);
    }
}

/// A thumbnail as a worker answers it: width, height, pages (big-endian u32 each), PNG.
pub(crate) fn encode(t: &Thumbnail) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + t.png.len());
    for n in [t.width, t.height, t.pages] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(&t.png);
    out
}

fn decode(answer: Vec<u8>) -> Option<Thumbnail> {
    let word = |i: usize| -> Option<u32> {
        Some(u32::from_be_bytes(answer.get(i..i + 4)?.try_into().ok()?))
    };
    let (width, height, pages) = (word(0)?, word(4)?, word(8)?);
    Some(Thumbnail {
        png: answer.get(12..)?.to_vec(),
        width,
        height,
        pages,
    })
}

/// A render error as a worker reports it: its class, a newline, the message.
pub(crate) fn refusal(e: &RenderError) -> String {
    let class = match e {
        RenderError::Media(MediaError::Unsupported) => class::UNSUPPORTED_TYPE,
        RenderError::Media(MediaError::Library { .. }) => class::PDFIUM,
        RenderError::Pdf(_) | RenderError::Media(MediaError::Image(_)) => class::UNRENDERABLE,
        RenderError::Media(MediaError::TooLarge { .. }) => class::OVER_LIMITS,
    };
    format!("{class}\n{e}")
}

/// The class of a worker's refusal (one of this stage's, never text from the worker).
fn refusal_class(message: &str) -> &'static str {
    let class = message.split('\n').next().unwrap_or_default();
    [
        class::UNSUPPORTED_TYPE,
        class::PDFIUM,
        class::OVER_LIMITS,
        class::UNRENDERABLE,
    ]
    .into_iter()
    .find(|c| *c == class)
    .unwrap_or(class::UNRENDERABLE)
}

impl Stage for Thumbnails {
    const NAME: &'static str = THUMBNAILS;
    const VERSION: i32 = STAGE_VERSION;

    async fn process(&self, doc: &Document) -> Result<Output, HandlerError> {
        let clock = std::time::Instant::now();
        let rendered = self.pool.run(&doc.bytes).await;
        let elapsed = clock.elapsed().as_secs_f64();
        let thumb = match rendered {
            Ok(answer) => decode(answer).ok_or_else(|| {
                HandlerError::permanent(class::RENDER_PANIC, "malformed answer from the worker")
            })?,
            Err(IsolationError::Job(message)) => {
                self.observe("unrenderable", elapsed);
                let class = refusal_class(&message);
                let message = message.split_once('\n').map_or(message.as_str(), |m| m.1);
                return Err(HandlerError::permanent(class, message));
            }
            Err(e @ IsolationError::Io { .. }) => {
                // Workers cannot be started: a problem of this replica, not the document.
                return Err(HandlerError::transient(e.class(), e));
            }
            Err(e) => {
                self.observe("killed", elapsed);
                tracing::warn!(document = %doc.event.document_id, class = e.class(), error = %e, "render worker failed");
                return Err(HandlerError::permanent(e.class(), e));
            }
        };
        self.observe("ok", elapsed);
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
