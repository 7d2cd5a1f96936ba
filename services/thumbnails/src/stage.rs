//! The `thumbnails` stage: the first page of a document as a PNG that fits in `--max-px`.
//! Everything around it (decode, done-check, blob and digest checks, recording,
//! `doc.processed`, dead letters) is the stage layer's ([`docflow_stage`]).

use docflow_events::stages::THUMBNAILS;
use docflow_runtime::HandlerError;
use docflow_stage::{Document, Output, Stage};
use prometheus::{HistogramOpts, HistogramVec, Registry};
use serde_json::json;

use docflow_stage::class;
use docflow_stage::isolate::{IsolationError, Refusal, Workers};

use crate::RenderWorker;
use crate::render::RenderError;

/// Version of the thumbnail logic. Bump it when the output changes (size, renderer fix):
/// replayed documents then get new rows and new keys instead of being skipped as done.
pub const STAGE_VERSION: i32 = 1;

/// The classes a render worker refuses a document with (the first is the fallback), beside
/// the layer's, the runtime's and the isolation classes (`memory_limit`, `timeout`,
/// `stalled`, `worker_crashed`, `malformed_answer`): the shared classes of stages that read
/// documents ([`docflow_stage::class`]).
pub const REFUSALS: &[&str] = &[
    class::UNREADABLE,
    class::UNSUPPORTED_TYPE,
    class::OVER_LIMITS,
    class::SETUP,
];

/// How a render ended: the `outcome` label of `docflow_thumbnail_render_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenderOutcome {
    /// Rendered (`ok`).
    Ok,
    /// The worker refused the document (`unrenderable`).
    Unrenderable,
    /// The worker died, ran out of time or memory, or answered nonsense (`killed`).
    Killed,
}

impl RenderOutcome {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            RenderOutcome::Ok => "ok",
            RenderOutcome::Unrenderable => "unrenderable",
            RenderOutcome::Killed => "killed",
        }
    }
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

    /// Observes one render that took `seconds` and ended with `outcome`.
    pub(crate) fn observe_render(&self, outcome: RenderOutcome, seconds: f64) {
        self.render
            .with_label_values(&[outcome.as_str()])
            .observe(seconds);
    }
}

/// The rendering of stage `thumbnails`: each document is rendered in an isolated worker
/// process ([`docflow_stage::isolate`]), so a PDF that makes pdfium allocate without end,
/// spin or crash costs one worker, never the stage, and one slow PDF does not hold pdfium's
/// process-wide lock for the others.
#[derive(Debug)]
pub struct Thumbnails {
    pub(crate) workers: Workers<RenderWorker>,
    pub(crate) metrics: StageMetrics,
}

impl Thumbnails {
    /// The stage rendering in `workers`, its metrics registered in `registry`.
    pub fn new(
        workers: Workers<RenderWorker>,
        registry: &Registry,
    ) -> Result<Self, prometheus::Error> {
        Ok(Thumbnails {
            workers,
            metrics: StageMetrics::new(registry)?,
        })
    }
}

/// A render error as a worker reports it.
pub(crate) fn refusal(e: &RenderError) -> Refusal {
    match e {
        RenderError::Media(m) => m.refusal(),
        RenderError::Pdf(_) => Refusal::new(class::UNREADABLE, e),
    }
}

impl Stage for Thumbnails {
    const NAME: &'static str = THUMBNAILS;
    const VERSION: i32 = STAGE_VERSION;

    async fn process(&self, doc: &Document) -> Result<Output, HandlerError> {
        let clock = std::time::Instant::now();
        let rendered = self.workers.run(&doc.bytes).await;
        let elapsed = clock.elapsed().as_secs_f64();
        let (thumb, png) = match rendered {
            Ok(reply) => (reply.value, reply.bytes),
            Err(e) => {
                match e {
                    IsolationError::Refused(_) => self
                        .metrics
                        .observe_render(RenderOutcome::Unrenderable, elapsed),
                    // Workers cannot be started: a problem of this replica (retried).
                    IsolationError::Io { .. } => {}
                    _ => {
                        self.metrics.observe_render(RenderOutcome::Killed, elapsed);
                        tracing::warn!(document = %doc.event.document_id, class = e.class(), error = %e, "render worker failed");
                    }
                }
                return Err(e.into_handler_error(""));
            }
        };
        self.metrics.observe_render(RenderOutcome::Ok, elapsed);
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
            "width": width, "height": height, "pages": pages, "png_bytes": png.len()
        });
        Ok(Output::default().artifact("png", png).summary(summary))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_outcomes_keep_their_label_values() {
        let registry = Registry::new();
        let m = StageMetrics::new(&registry).unwrap();
        let outcomes = [
            (RenderOutcome::Ok, "ok"),
            (RenderOutcome::Unrenderable, "unrenderable"),
            (RenderOutcome::Killed, "killed"),
        ];
        for (o, label) in outcomes {
            assert_eq!(o.as_str(), label);
            m.observe_render(o, 0.1);
        }
        let t = docflow_runtime::metrics::text(&registry).unwrap();
        for (_, label) in outcomes {
            let line = format!("docflow_thumbnail_render_seconds_count{{outcome=\"{label}\"}} 1");
            assert!(t.lines().any(|l| l == line), "{line}\n{t}");
        }
    }
}
