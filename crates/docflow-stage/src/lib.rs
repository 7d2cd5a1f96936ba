//! THE stage layer: every consumer group of `doc.uploaded` that turns a document into a result
//! is a [`Stage`] run by [`run_until`]; the stage writes only its own work.
//!
//! For each record the layer does, once, for every stage:
//! 1. **decode** the `doc.uploaded` event (undecodable → dead letter at once);
//! 2. **done-check**: a `done` run of (tenant, document, stage, version) already recorded →
//!    only make sure its `doc.processed` was sent (the repair of a crash after recording);
//! 3. **read the bytes** from this stack's object store — only a key under the event's own
//!    tenant (`tenant_mismatch` otherwise) — and check they hash to the document id
//!    (`digest_mismatch`);
//! 4. [`Stage::process`] — the stage's own work;
//! 5. **store the artifact** at `<tenant>/derived/<stage>/v<version>/<idempotency key>.<ext>`
//!    (same bytes, same key: a rewrite is harmless) and **record** the `done` run (final for
//!    this version);
//! 6. **announce** `doc.processed` unless the run's outbox mark says it was acknowledged,
//!    then set the mark. Only then does the runtime store the offset.
//!
//! A permanent error (or the last transient one) is dead-lettered by the runtime; once the
//! dead-letter topic acknowledged it, the layer records a `dead_lettered` run from the event
//! it already decoded and announces it (`outcome = DEAD_LETTERED`). One producer serves the
//! process: results and dead letters. Deliveries are counted in the result store
//! ([`StoreLedger`]), so a document that keeps taking the process down is dead-lettered
//! (`crash_loop`) after `--max-crash-deliveries` instead of stalling its partition.
//!
//! Events from other producers than ingest are a supported use: the layer accepts any
//! decodable `doc.uploaded` whose object lies in this stack's store under the event's tenant
//! and whose bytes hash to its document id; anything else is dead-lettered with its class.
//!
//! A whole stage (`examples/byte_count.rs`, built with the workspace's examples):
//!
//! ```no_run
#![doc = include_str!("../examples/byte_count.rs")]
//! ```

use std::future::Future;

use bytes::Bytes;
use docflow_events::DocUploaded;
use docflow_runtime::HandlerError;
pub use docflow_store::text::{ChunkRow, DocumentText, LineBox, PageLayout, PageText, TextSource};

mod args;
pub mod isolate;
mod layer;
mod ledger;
#[cfg(feature = "media")]
pub mod media;
pub mod service;

pub use args::StageArgs;
pub use layer::{StageHandler, run_until};
pub use ledger::StoreLedger;
pub use service::{LocalTools, StageService, main};

/// Error classes the layer assigns (the `docflow.dlq.error.class` of its dead letters).
pub mod class {
    /// The event's object URI is not a key of this stack's object store.
    pub const OBJECT_URI: &str = "object_uri";
    /// The event's object lies under another tenant than the event's.
    pub const TENANT_MISMATCH: &str = "tenant_mismatch";
    /// The bytes do not hash to the event's document id.
    pub const DIGEST_MISMATCH: &str = "digest_mismatch";
    /// The object store failed (transient).
    pub const OBJECT_STORE: &str = "object_store";
    /// The object named by the event is not there (transient: it may be replicating).
    pub const BLOB_MISSING: &str = "blob_missing";

    // Shared by the stages that read documents (their workers' refusals).

    /// Not a PDF, PNG, JPEG or TIFF.
    pub const UNSUPPORTED_TYPE: &str = "unsupported_type";
    /// The PDF or image is corrupt, encrypted or has no pages.
    pub const UNREADABLE: &str = "unreadable";
    /// Over a page, pixel or size limit.
    pub const OVER_LIMITS: &str = "over_limits";
    /// A worker cannot use its libraries or models (pdfium, OCR): a problem of the replica,
    /// retried, whatever the document.
    pub const SETUP: &str = "setup";
}

/// A stage: its name, its version and its work on one verified document.
pub trait Stage: Send + Sync + 'static {
    /// The stage name: the `stage` of its results and its default consumer group.
    const NAME: &'static str;
    /// Version of the stage's logic. Bump it when the output changes (a fix, a new model):
    /// replayed documents then get new rows and new keys instead of being skipped as done.
    const VERSION: i32;

    /// The work. Runs only for a document whose result for this version is not recorded
    /// yet, on bytes read from the object store and checked. Return a permanent error for a
    /// document that can never succeed (it is dead-lettered) and a transient one for a
    /// dependency that may come back (retried, then dead-lettered). Blocking work belongs
    /// on `tokio::task::spawn_blocking`.
    fn process(&self, doc: &Document) -> impl Future<Output = Result<Output, HandlerError>> + Send;
}

/// A document handed to [`Stage::process`]: its event and its verified bytes.
#[derive(Debug, Clone)]
pub struct Document {
    /// The `doc.uploaded` event.
    pub event: DocUploaded,
    /// The bytes; they hash to `event.document_id`.
    pub bytes: Bytes,
    /// sha256(bytes ‖ stage ‖ version): the key of this stage's result.
    pub idempotency_key: String,
    /// 1 on the first try, 2 on the first retry, ...
    pub attempt: u32,
    /// Where pages are kept as they are read (`None` outside a running stage, e.g. in
    /// calibration): a redelivery of a long document continues after the pages kept.
    pub progress: Option<Progress>,
}

/// A text stage's pages of one document kept in the result store as they are read, before
/// the document is done: a redelivery (after SIGTERM, a rebalance or a crash) asks for them
/// and reads only the rest. Kept pages are rows under the run's own key, so the final
/// [`Output::text`] finds them there and keeps them as they are.
#[derive(Debug, Clone)]
pub struct Progress {
    text: docflow_store::TextStore,
    tenant_id: String,
    document_id: String,
    stage: &'static str,
    stage_version: i32,
}

impl Progress {
    pub(crate) fn new(
        text: docflow_store::TextStore,
        event: &DocUploaded,
        stage: &'static str,
        stage_version: i32,
    ) -> Self {
        Progress {
            text,
            tenant_id: event.tenant_id.clone(),
            document_id: event.document_id.clone(),
            stage,
            stage_version,
        }
    }

    fn key(&self) -> docflow_store::TextKey<'_> {
        docflow_store::TextKey {
            tenant_id: &self.tenant_id,
            document_id: &self.document_id,
            stage: self.stage,
            stage_version: self.stage_version,
        }
    }

    /// The pages earlier deliveries of this document kept, in order.
    pub async fn kept(&self) -> Result<Vec<PageText>, HandlerError> {
        self.text
            .pages_of(self.key())
            .await
            .map_err(|e| HandlerError::transient(docflow_runtime::handler::class::DATABASE, e))
    }

    /// Keeps `page` now (a page already kept stays as it is).
    pub async fn keep(&self, page: &PageText) -> Result<(), HandlerError> {
        self.text
            .put_page(self.key(), page)
            .await
            .map_err(|e| HandlerError::transient(docflow_runtime::handler::class::DATABASE, e))
    }
}

/// What a stage produced for one document.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// A file to keep (a thumbnail, a text layer); its object key becomes the run's result
    /// reference.
    pub artifact: Option<Artifact>,
    /// A small JSON summary shown in the job view (`output`); a `text` or `summary` string
    /// field there is surfaced on the job itself.
    pub summary: Option<serde_json::Value>,
    /// Pages of text and embedded chunks (text stages), stored in the result store's
    /// `document_pages` / `document_chunks` before the run is recorded.
    pub text: Option<DocumentText>,
}

impl Output {
    /// With `bytes` kept as `<idempotency key>.<extension>`.
    pub fn artifact(mut self, extension: &'static str, bytes: impl Into<Bytes>) -> Self {
        self.artifact = Some(Artifact {
            extension,
            bytes: bytes.into(),
        });
        self
    }

    /// With the document's pages and chunks.
    pub fn text(mut self, text: DocumentText) -> Self {
        self.text = Some(text);
        self
    }

    /// With `summary` as the run's output.
    pub fn summary(mut self, summary: serde_json::Value) -> Self {
        self.summary = Some(summary);
        self
    }
}

/// A file a stage keeps.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// File extension, without the dot (`png`).
    pub extension: &'static str,
    /// Contents.
    pub bytes: Bytes,
}

/// Errors starting a stage (processing errors are [`HandlerError`]s).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The result store could not be opened or migrated.
    #[error("result store: {0}")]
    Store(#[from] docflow_store::StoreError),
    /// The object store directory could not be opened.
    #[error("object store: {0}")]
    Blobs(#[from] docflow_store::BlobError),
    /// The registry client could not be built.
    #[error("schema registry: {0}")]
    Codec(#[from] docflow_events::CodecError),
    /// The Kafka runtime failed.
    #[error(transparent)]
    Runtime(#[from] docflow_runtime::RuntimeError),
    /// The stage's metrics could not be registered.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_builder_keeps_artifact_and_summary() {
        let out = Output::default()
            .artifact("png", vec![1u8, 2, 3])
            .summary(serde_json::json!({"pages": 1}));
        let a = out.artifact.unwrap();
        assert_eq!(a.extension, "png");
        assert_eq!(&a.bytes[..], &[1, 2, 3]);
        assert_eq!(out.summary.unwrap()["pages"], 1);
    }
}
