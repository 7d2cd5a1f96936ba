//! The `thumbnails` handler: one `doc.uploaded` record in, one stored PNG, one result row and
//! one `doc.processed` event out, each idempotent.
//!
//! Order of effects, so a crash anywhere is repaired by the redelivery:
//! 1. a `done` row for (tenant, document, stage, version) already there → only step 4;
//! 2. read the bytes (only from this stack's object store), check they hash to the document
//!    id, render (on a blocking thread), write the PNG under
//!    `<tenant>/derived/thumbnails/v<version>/<idempotency key>.png` (same bytes, same key:
//!    a rewrite is harmless);
//! 3. record the `done` row (final for this version);
//! 4. produce `doc.processed` unless the row's outbox mark says it was acknowledged, then set
//!    the mark.
//!
//! A document that cannot be rendered is recorded as `failed` and returned as a permanent
//! error (the runtime dead-letters it; the `dead_lettered` hook then records
//! `dead_lettered` and announces it).

use std::time::Duration;

use docflow_events::stages::THUMBNAILS;
use docflow_events::{DocProcessed, DocUploaded, EventCodec, Outcome, stage_keys};
use docflow_runtime::metrics::now_ms;
use docflow_runtime::trace::TRACEPARENT;
use docflow_runtime::{Handler, HandlerError, Record};
use docflow_store::{Blobs, ResultStore, StageRun, StageStatus, StoreError};
use prometheus::{HistogramOpts, HistogramVec, Registry};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

use crate::render::{RenderError, Renderer};

/// Version of the thumbnail logic. Bump it when the output changes (size, renderer fix):
/// replayed documents then get new rows and new keys instead of being skipped as done.
pub const STAGE_VERSION: i32 = 1;

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

/// The handler of consumer group `thumbnails`.
pub struct Thumbnails {
    pub(crate) renderer: Renderer,
    pub(crate) blobs: Blobs,
    pub(crate) results: ResultStore,
    pub(crate) codec: EventCodec,
    pub(crate) producer: FutureProducer,
    pub(crate) processed_topic: String,
    pub(crate) produce_timeout: Duration,
    pub(crate) metrics: StageMetrics,
}

impl std::fmt::Debug for Thumbnails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thumbnails")
            .field("renderer", &self.renderer)
            .field("blobs", &self.blobs)
            .field("processed_topic", &self.processed_topic)
            .finish_non_exhaustive()
    }
}

fn db(e: StoreError) -> HandlerError {
    // A query the database refuses is still worth retrying: the schema may be migrating.
    HandlerError::transient("database", e)
}

impl Thumbnails {
    fn run_for(&self, event: &DocUploaded, record: &Record, started_at_ms: i64) -> StageRun {
        StageRun {
            tenant_id: event.tenant_id.clone(),
            document_id: event.document_id.clone(),
            stage: THUMBNAILS.to_owned(),
            stage_version: STAGE_VERSION,
            status: StageStatus::Done,
            idempotency_key: None,
            result_ref: None,
            output: None,
            error: None,
            attempts: i64::from(record.attempt),
            started_at_ms,
            finished_at_ms: now_ms(),
            event_sent_at_ms: None,
        }
    }

    /// Produces `doc.processed` for `run` unless already acknowledged, then marks it.
    async fn announce(&self, run: &StageRun, record: &Record) -> Result<(), HandlerError> {
        if run.event_sent_at_ms.is_some() {
            return Ok(());
        }
        let event = DocProcessed {
            document_id: run.document_id.clone(),
            tenant_id: run.tenant_id.clone(),
            stage: run.stage.clone(),
            stage_version: run.stage_version,
            outcome: match run.status {
                StageStatus::Done => Outcome::Ok,
                StageStatus::Failed => Outcome::Failed,
                StageStatus::DeadLettered => Outcome::DeadLettered,
            },
            result_ref: run.result_ref.clone(),
            duration_ms: run.duration_ms(),
            finished_at: run.finished_at_ms,
        };
        let payload = self.codec.encode(&event).await?;
        let trace = record.trace.to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: TRACEPARENT,
            value: Some(trace.as_bytes()),
        });
        self.producer
            .send(
                FutureRecord::to(&self.processed_topic)
                    .key(&run.document_id)
                    .payload(&payload)
                    .headers(headers),
                self.produce_timeout,
            )
            .await
            .map_err(|(e, _)| HandlerError::transient("produce", e))?;
        self.results
            .mark_event_sent(run, now_ms())
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn decode(&self, record: &Record) -> Result<DocUploaded, HandlerError> {
        let payload = record
            .payload
            .as_deref()
            .ok_or_else(|| HandlerError::permanent("empty", "record has no value"))?;
        Ok(self.codec.decode::<DocUploaded>(payload).await?)
    }
}

impl Handler for Thumbnails {
    async fn handle(&self, record: &Record) -> Result<(), HandlerError> {
        let event = self.decode(record).await?;
        let (tenant, doc) = (event.tenant_id.as_str(), event.document_id.as_str());
        if let Some(run) = self
            .results
            .get(tenant, doc, THUMBNAILS, STAGE_VERSION)
            .await
            .map_err(db)?
            && run.status == StageStatus::Done
        {
            tracing::debug!(tenant, document = doc, "thumbnail already done");
            return self.announce(&run, record).await;
        }

        let started = now_ms();
        let key = self
            .blobs
            .key_of(&event.object_uri)
            .map_err(|e| HandlerError::permanent("object_uri", e))?;
        let bytes = self
            .blobs
            .get(&key)
            .await
            .map_err(|e| HandlerError::transient("object_store", e))?
            .ok_or_else(|| {
                HandlerError::transient("blob_missing", format!("no blob at {}", event.object_uri))
            })?;
        let (digest, ikey) = stage_keys(&bytes, THUMBNAILS, STAGE_VERSION);
        if digest != event.document_id {
            return Err(HandlerError::permanent(
                "digest_mismatch",
                format!(
                    "the bytes at {} do not hash to the document id",
                    event.object_uri
                ),
            ));
        }
        let renderer = self.renderer;
        let clock = std::time::Instant::now();
        let rendered = tokio::task::spawn_blocking(move || renderer.render(&bytes))
            .await
            .map_err(|e| HandlerError::permanent("render_panic", e))?;
        let elapsed = clock.elapsed().as_secs_f64();
        let mut run = self.run_for(&event, record, started);
        run.idempotency_key = Some(ikey.clone());
        let thumb = match rendered {
            Ok(t) => t,
            Err(e) => {
                self.metrics
                    .render
                    .with_label_values(&["unrenderable"])
                    .observe(elapsed);
                let class = match e {
                    RenderError::Unsupported => "unsupported_type",
                    RenderError::Library { .. } => "pdfium",
                    RenderError::Pdf(_) | RenderError::Image(_) => "unrenderable",
                };
                run.status = StageStatus::Failed;
                run.error = Some(e.to_string());
                self.results.record(&run).await.map_err(db)?;
                return Err(HandlerError::permanent(class, e));
            }
        };
        self.metrics
            .render
            .with_label_values(&["ok"])
            .observe(elapsed);
        let out = Blobs::key([
            tenant,
            "derived",
            THUMBNAILS,
            &format!("v{STAGE_VERSION}"),
            &format!("{ikey}.png"),
        ]);
        let (width, height, pages, size) =
            (thumb.width, thumb.height, thumb.pages, thumb.png.len());
        self.blobs
            .put(&out, thumb.png.into())
            .await
            .map_err(|e| HandlerError::transient("object_store", e))?;
        run.result_ref = Some(out.to_string());
        run.output = Some(
            json!({"width": width, "height": height, "pages": pages, "png_bytes": size})
                .to_string(),
        );
        run.finished_at_ms = now_ms();
        let stored = self.results.record(&run).await.map_err(db)?;
        tracing::info!(
            tenant,
            document = doc,
            width,
            height,
            pages,
            render_ms = (elapsed * 1000.0).round(),
            "thumbnail stored"
        );
        self.announce(&stored, record).await
    }

    async fn dead_lettered(&self, record: &Record, error: &HandlerError) {
        // An undecodable record names no document: the DLQ headers are all there is.
        let Ok(event) = self.decode(record).await else {
            return;
        };
        let mut run = self.run_for(&event, record, record.timestamp_ms.unwrap_or_else(now_ms));
        run.status = StageStatus::DeadLettered;
        run.error = Some(error.to_string());
        let stored = match self.results.record(&run).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, document = %event.document_id, "could not record the dead-lettered run");
                return;
            }
        };
        if let Err(e) = self.announce(&stored, record).await {
            tracing::warn!(error = %e, document = %event.document_id, "could not announce the dead-lettered run");
        }
    }
}
