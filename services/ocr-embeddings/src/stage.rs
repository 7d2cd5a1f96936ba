//! The `ocr-embeddings` stage: pages read in a worker, chunks embedded here, an extractive
//! summary. Everything around it (decode, done-check, blob and digest checks, recording,
//! `doc.processed`, dead letters) is the stage layer's ([`docflow_stage`]).

use docflow_embed::{Batcher, EmbedError, summary};
use docflow_events::stages::OCR_EMBEDDINGS;
use docflow_runtime::HandlerError;
use docflow_stage::isolate::{IsolationError, Workers};
use docflow_stage::{ChunkRow, Document, DocumentText, Output, PageText, Stage, TextSource};
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry};
use serde_json::json;

use crate::pages::{Extracted, Page};

/// Version of this stage's logic. Bump it when the output changes (a new OCR or embedding
/// model, a chunking fix): replayed documents then get new rows instead of being skipped.
pub const STAGE_VERSION: i32 = 1;

/// Sentences embedded for a summary at most (evenly spaced over a longer document).
pub const SUMMARY_CANDIDATES: usize = 256;

/// The DLQ error classes of this stage (besides the layer's, the runtime's and the
/// isolation classes `memory_limit`, `timeout`, `stalled`, `worker_crashed`,
/// `malformed_answer`).
pub mod class {
    /// The classes shared by the stages that read documents: `unsupported_type`,
    /// `unreadable`, `over_limits` (a page, pixel-per-page or pixel-per-document limit) and
    /// `setup` (pdfium or the OCR models cannot be used by the worker: a problem of the
    /// replica, retried).
    pub use docflow_stage::class::{OVER_LIMITS, SETUP, UNREADABLE, UNSUPPORTED_TYPE};
    /// OCR failed on the document.
    pub const OCR_FAILED: &str = "ocr_failed";
    /// The embedding model failed.
    pub const EMBEDDING: &str = "embedding";
}

/// The classes a page-reading worker refuses a document with (the first is the fallback).
pub const REFUSALS: &[&str] = &[
    class::UNREADABLE,
    class::UNSUPPORTED_TYPE,
    class::OVER_LIMITS,
    class::OCR_FAILED,
    class::SETUP,
];

/// Settings of the stage's own work.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Tokens shared by consecutive chunks.
    pub chunk_overlap: usize,
    /// Sentences in a summary.
    pub summary_sentences: usize,
    /// Pages of one document read at once (each in its own worker).
    pub parallel_pages: usize,
    /// Most chunks of one document (`over_limits` past it).
    pub max_chunks: usize,
}

/// How reading a document's pages ended: the `outcome` label of `docflow_ocr_read_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ReadOutcome {
    /// Every page read (`ok`).
    Ok,
    /// A worker refused the document (`refused`).
    Refused,
    /// A worker died, ran out of time or memory, or answered nonsense (`killed`).
    Killed,
}

impl ReadOutcome {
    /// The label value.
    const fn as_str(self) -> &'static str {
        match self {
            ReadOutcome::Ok => "ok",
            ReadOutcome::Refused => "refused",
            ReadOutcome::Killed => "killed",
        }
    }
}

/// How embedding a document ended: the `outcome` label of `docflow_embed_document_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum EmbedOutcome {
    /// Chunks and summary embedded (`ok`).
    Ok,
    /// Embedding the chunks failed (`failed`).
    Failed,
}

impl EmbedOutcome {
    /// The label value.
    const fn as_str(self) -> &'static str {
        match self {
            EmbedOutcome::Ok => "ok",
            EmbedOutcome::Failed => "failed",
        }
    }
}

/// Stage metrics (the runtime's consumer metrics cover delivery, retries and lag).
#[derive(Debug, Clone)]
struct Metrics {
    read: HistogramVec,
    embed: HistogramVec,
    pages: IntCounterVec,
    dropped_boxes: IntCounter,
    resumed_pages: IntCounter,
    worker_peak: prometheus::Histogram,
}

impl Metrics {
    fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let buckets = vec![
            0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
        ];
        let read = HistogramVec::new(
            HistogramOpts::new(
                "docflow_ocr_read_seconds",
                "Time to read one document's pages in a worker (text layer or OCR), by outcome",
            )
            .buckets(buckets.clone()),
            &["outcome"],
        )?;
        let embed = HistogramVec::new(
            HistogramOpts::new(
                "docflow_embed_document_seconds",
                "Time to embed one document's chunks and summary sentences, by outcome",
            )
            .buckets(buckets),
            &["outcome"],
        )?;
        let pages = IntCounterVec::new(
            Opts::new(
                "docflow_ocr_pages_total",
                "Pages read, by where their text came from (text_layer, ocr)",
            ),
            &["source"],
        )?;
        registry.register(Box::new(read.clone()))?;
        registry.register(Box::new(embed.clone()))?;
        let dropped_boxes = IntCounter::new(
            "docflow_ocr_dropped_boxes_total",
            "Text boxes found on OCR pages past the per-page cap and not read (the pages are \
             marked truncated in their document's result)",
        )?;
        registry.register(Box::new(pages.clone()))?;
        let worker_peak = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "docflow_ocr_worker_peak_rss_bytes",
                "Peak resident memory of the page-reading worker during one document (size \
                 --worker-memory from it)",
            )
            .buckets((0..8).map(|i| f64::from(64u32 << i) * 1048576.0).collect()),
        )?;
        registry.register(Box::new(dropped_boxes.clone()))?;
        let resumed_pages = IntCounter::new(
            "docflow_ocr_resumed_pages_total",
            "OCR pages an earlier, interrupted delivery of their document had read and kept, \
             taken from the result store instead of read again",
        )?;
        registry.register(Box::new(resumed_pages.clone()))?;
        registry.register(Box::new(worker_peak.clone()))?;
        Ok(Metrics {
            read,
            embed,
            pages,
            dropped_boxes,
            resumed_pages,
            worker_peak,
        })
    }

    /// Observes reading one document's pages: `seconds`, ended with `outcome`.
    fn observe_read(&self, outcome: ReadOutcome, seconds: f64) {
        self.read
            .with_label_values(&[outcome.as_str()])
            .observe(seconds);
    }

    /// Observes embedding one document: `seconds`, ended with `outcome`.
    fn observe_embed(&self, outcome: EmbedOutcome, seconds: f64) {
        self.embed
            .with_label_values(&[outcome.as_str()])
            .observe(seconds);
    }

    /// Counts one page read, by where its text came from.
    fn page_read(&self, source: TextSource) {
        self.pages.with_label_values(&[source.as_str()]).inc();
    }

    /// Counts text boxes of an OCR page past the per-page cap, not read.
    fn dropped_boxes(&self, boxes: u64) {
        self.dropped_boxes.inc_by(boxes);
    }

    /// Counts a page taken from an earlier delivery's kept pages.
    fn resumed_page(&self) {
        self.resumed_pages.inc();
    }

    /// Observes the page-reading worker's peak resident memory during one document.
    fn observe_worker_peak(&self, bytes: f64) {
        self.worker_peak.observe(bytes);
    }
}

/// The stage: pages read in `pool`'s workers, embedded by `batcher`.
#[derive(Debug)]
pub struct OcrEmbeddings {
    pool: Workers<crate::ReadWorker>,
    batcher: Batcher,
    settings: Settings,
    metrics: Metrics,
}

impl OcrEmbeddings {
    /// The stage, its metrics registered in `registry`.
    pub fn new(
        pool: Workers<crate::ReadWorker>,
        batcher: Batcher,
        settings: Settings,
        registry: &Registry,
    ) -> Result<Self, prometheus::Error> {
        Ok(OcrEmbeddings {
            pool,
            batcher,
            settings,
            metrics: Metrics::new(registry)?,
        })
    }

    /// The document's pages, and how many of them an earlier delivery had kept.
    async fn read(&self, doc: &Document) -> Result<(Extracted, usize), HandlerError> {
        let clock = std::time::Instant::now();
        let answer = self.read_keeping(doc).await;
        let seconds = clock.elapsed().as_secs_f64();
        let failure = match answer {
            Ok((extracted, resumed)) => {
                self.metrics.observe_read(ReadOutcome::Ok, seconds);
                if let Some(memory) = extracted.memory {
                    self.metrics
                        .observe_worker_peak(memory.peak_rss_bytes as f64);
                }
                return Ok((extracted, resumed));
            }
            Err(Failed::Keep(e)) => return Err(e),
            Err(Failed::Read(failure)) => failure,
        };
        let at = failure
            .page
            .map(|p| format!("page {p}: "))
            .unwrap_or_default();
        match failure.error {
            IsolationError::Refused(_) => self.metrics.observe_read(ReadOutcome::Refused, seconds),
            // Workers cannot be started: a problem of this replica (retried).
            IsolationError::Io { .. } => {}
            ref e => {
                self.metrics.observe_read(ReadOutcome::Killed, seconds);
                tracing::warn!(document = %doc.event.document_id, page = failure.page, class = e.class(), error = %e, "page-reading worker failed");
            }
        }
        Err(failure.error.into_handler_error(&at))
    }

    /// The plan, then the pages to OCR that no earlier delivery kept, each kept as soon as
    /// it is read: a long scan interrupted (SIGTERM, a rebalance, a crash) continues from
    /// the pages not yet read.
    async fn read_keeping(&self, doc: &Document) -> Result<(Extracted, usize), Failed> {
        use futures::TryStreamExt;
        let planned = crate::plan_document(&self.pool, &doc.bytes)
            .await
            .map_err(Failed::Read)?;
        let kept = match &doc.progress {
            Some(progress) if planned.ocr.len() > 1 => {
                progress.kept().await.map_err(Failed::Keep)?
            }
            _ => Vec::new(),
        };
        let mut out = Extracted::of(planned.pages, planned.ocr_pixels);
        let mut todo = planned.ocr;
        let mut resumed = 0;
        for page in kept {
            if let Some(i) = todo.iter().position(|&n| n == page.page) {
                todo.swap_remove(i);
                resumed += 1;
                self.metrics.resumed_page();
                out.pages.push(Page {
                    page: page.page,
                    source: page.source.as_str().to_owned(),
                    confidence: page.confidence,
                    text: page.text,
                    layout: page.layout,
                    timings: None,
                });
            }
        }
        todo.sort_unstable();
        let keep = doc.progress.as_ref().filter(|_| todo.len() > 1);
        let mut read = std::pin::pin!(crate::read_pages(
            &self.pool,
            &doc.bytes,
            todo,
            self.settings.parallel_pages
        ));
        while let Some(page) = read.try_next().await.map_err(Failed::Read)? {
            if let Some(progress) = keep {
                for p in &page.pages {
                    progress
                        .keep(&page_text(p.clone()))
                        .await
                        .map_err(Failed::Keep)?;
                }
            }
            out.absorb(page);
        }
        out.pages.sort_by_key(|p| p.page);
        Ok((out, resumed))
    }

    async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, HandlerError> {
        self.batcher.embed(texts).await.map_err(|e| match e {
            // Nothing about the document: the model thread or batch failed; retried.
            EmbedError::Stopped | EmbedError::Batch(_) => {
                HandlerError::transient(class::EMBEDDING, e)
            }
            other => HandlerError::permanent(class::EMBEDDING, other),
        })
    }
}

/// Why [`OcrEmbeddings::read_keeping`] stopped.
enum Failed {
    /// A page (or the plan) was not read.
    Read(crate::ReadFailure),
    /// A page read could not be kept (the database).
    Keep(HandlerError),
}

/// A page as the result store keeps it.
fn page_text(p: Page) -> PageText {
    PageText {
        page: p.page,
        source: TextSource::parse(&p.source).unwrap_or(TextSource::Ocr),
        confidence: p.confidence,
        text: p.text,
        layout: p.layout,
    }
}

/// Up to `max` items of `0..n`, evenly spaced, in order.
fn spread(n: usize, max: usize) -> Vec<usize> {
    if n <= max {
        return (0..n).collect();
    }
    (0..max).map(|i| i * n / max).collect()
}

impl Stage for OcrEmbeddings {
    const NAME: &'static str = OCR_EMBEDDINGS;
    const VERSION: i32 = STAGE_VERSION;

    async fn process(&self, doc: &Document) -> Result<Output, HandlerError> {
        let (extracted, resumed_pages) = self.read(doc).await?;
        let clock = std::time::Instant::now();
        let mut pages = Vec::with_capacity(extracted.pages.len());
        let mut chunks: Vec<ChunkRow> = Vec::new();
        let mut truncated_pages = Vec::new();
        let extracted_pages = extracted.pages.len();
        let mut characters_so_far = 0usize;
        for p in extracted.pages.into_iter().map(page_text) {
            let unread = p.layout.as_ref().map_or(0, |l| l.unread_boxes);
            if unread > 0 {
                self.metrics.dropped_boxes(unread as u64);
                truncated_pages.push(json!({ "page": p.page, "unread_boxes": unread }));
                tracing::warn!(
                    document = %doc.event.document_id,
                    page = p.page,
                    unread_boxes = unread,
                    "page truncated: more text boxes than the per-page cap"
                );
            }
            self.metrics.page_read(p.source);
            let pieces = self
                .batcher
                .chunks(&p.text, self.settings.chunk_overlap)
                .map_err(|e| HandlerError::permanent(class::EMBEDDING, e))?;
            if chunks.len() + pieces.len() > self.settings.max_chunks {
                return Err(HandlerError::permanent(
                    class::OVER_LIMITS,
                    format!(
                        "the text is over {} chunks (--max-chunks) by page {} of {} ({} characters so far)",
                        self.settings.max_chunks,
                        p.page,
                        extracted_pages,
                        characters_so_far + p.text.len(),
                    ),
                ));
            }
            characters_so_far += p.text.len();
            chunks.extend(pieces.into_iter().map(|c| ChunkRow {
                page: p.page,
                start: c.start,
                end: c.end,
                text: c.text,
                vector: Vec::new(),
            }));
            pages.push(p);
        }
        let vectors = self
            .embed(chunks.iter().map(|c| c.text.clone()).collect())
            .await;
        let vectors = match vectors {
            Ok(v) => v,
            Err(e) => {
                self.metrics
                    .observe_embed(EmbedOutcome::Failed, clock.elapsed().as_secs_f64());
                return Err(e);
            }
        };
        for (chunk, vector) in chunks.iter_mut().zip(vectors) {
            chunk.vector = vector;
        }
        // The summary: the sentences nearest the document's mean, in document order.
        let mut sentences: Vec<String> = Vec::new();
        for p in &pages {
            sentences.extend(
                summary::sentences(&p.text)
                    .into_iter()
                    .filter_map(|(a, b)| p.text.get(a..b))
                    .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")),
            );
        }
        let candidates: Vec<String> = spread(sentences.len(), SUMMARY_CANDIDATES)
            .into_iter()
            .filter_map(|i| sentences.get(i).cloned())
            .collect();
        let vectors = self.embed(candidates.clone()).await?;
        let picked = summary::extractive(&vectors, self.settings.summary_sentences);
        let summary_text = picked
            .iter()
            .filter_map(|&i| candidates.get(i).map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        self.metrics
            .observe_embed(EmbedOutcome::Ok, clock.elapsed().as_secs_f64());
        let ocr_pages = pages.iter().filter(|p| p.source == TextSource::Ocr).count();
        let characters: usize = pages.iter().map(|p| p.text.chars().count()).sum();
        tracing::debug!(
            document = %doc.event.document_id,
            pages = pages.len(),
            ocr_pages,
            chunks = chunks.len(),
            "document read and embedded"
        );
        let output = json!({
            "pages": pages.len(),
            "ocr_pages": ocr_pages,
            "text_layer_pages": pages.len() - ocr_pages,
            "ocr_pixels": extracted.ocr_pixels,
            "characters": characters,
            "chunks": chunks.len(),
            "summary": summary_text,
            "truncated_pages": truncated_pages,
            "resumed_pages": resumed_pages,
        });
        Ok(Output::default()
            .summary(output)
            .text(DocumentText { pages, chunks }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_series_keep_their_names_and_label_values() {
        let registry = Registry::new();
        let m = Metrics::new(&registry).unwrap();
        let reads = [
            (ReadOutcome::Ok, "ok"),
            (ReadOutcome::Refused, "refused"),
            (ReadOutcome::Killed, "killed"),
        ];
        for (o, label) in reads {
            assert_eq!(o.as_str(), label);
            m.observe_read(o, 0.1);
        }
        let embeds = [(EmbedOutcome::Ok, "ok"), (EmbedOutcome::Failed, "failed")];
        for (o, label) in embeds {
            assert_eq!(o.as_str(), label);
            m.observe_embed(o, 0.1);
        }
        m.page_read(TextSource::TextLayer);
        m.page_read(TextSource::Ocr);
        let t = docflow_runtime::metrics::text(&registry).unwrap();
        let mut expected: Vec<String> = Vec::new();
        for (_, label) in reads {
            expected.push(format!(
                "docflow_ocr_read_seconds_count{{outcome=\"{label}\"}} 1"
            ));
        }
        for (_, label) in embeds {
            expected.push(format!(
                "docflow_embed_document_seconds_count{{outcome=\"{label}\"}} 1"
            ));
        }
        for source in ["text_layer", "ocr"] {
            expected.push(format!("docflow_ocr_pages_total{{source=\"{source}\"}} 1"));
        }
        for line in expected {
            assert!(t.lines().any(|l| l == line), "{line}\n{t}");
        }
    }

    #[test]
    fn summary_candidates_spread_over_the_document() {
        assert_eq!(spread(3, 5), vec![0, 1, 2]);
        assert_eq!(spread(10, 5), vec![0, 2, 4, 6, 8]);
        assert!(spread(1000, 256).windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn every_class_the_worker_refuses_with_is_declared() {
        use crate::pages::PageError;
        let m = || "x".to_owned();
        for e in [
            PageError::Setup(m()),
            PageError::Unsupported,
            PageError::Pdf(m()),
            PageError::Image(m()),
            PageError::OverLimits(m()),
            PageError::Ocr(m()),
            PageError::Request(m()),
        ] {
            let r = e.refusal();
            assert!(REFUSALS.contains(&r.class), "{e:?}");
            assert_eq!(r.transient, r.class == class::SETUP, "{e:?}");
        }
        assert_eq!(REFUSALS[0], class::UNREADABLE, "the fallback");
    }
}
