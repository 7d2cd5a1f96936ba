//! The event contract of docflow.
//!
//! * [`schema`]: the Avro schemas of every topic, embedded from `schemas/` at the
//!   workspace root, which is the single source of truth.
//! * [`types`]: Rust types for those schemas ([`DocUploaded`], [`DocProcessed`]).
//! * [`wire`]: the Confluent wire format (magic byte 0, 4-byte big-endian schema id, Avro body).
//! * [`codec`]: encode/decode events through a schema registry.
//! * [`compat`]: Avro compatibility levels, shared by the registry and the schema history check.
//! * [`references`]: schemas that use types of other schemas, made self-contained.
//!
//! Decoding never panics: garbage, a wrong magic byte, an unknown schema id or a body that
//! does not match its schema each give a typed [`CodecError`].

pub mod codec;
pub mod compat;
pub mod references;
pub mod schema;
pub mod types;
pub mod wire;

pub use codec::{CodecError, EventCodec};
pub use compat::{CompatibilityLevel, check_compatibility, check_versions};
pub use schema::{Event, SchemaError};
pub use types::{DocProcessed, DocUploaded, Outcome, document_id, idempotency_key, stage_keys};
pub use wire::WireError;

/// Stage names: each is a consumer group and the `stage` of its results.
pub mod stages {
    /// First-page PNG thumbnails.
    pub const THUMBNAILS: &str = "thumbnails";
    /// Text extraction (OCR where needed) and page embeddings.
    pub const OCR_EMBEDDINGS: &str = "ocr-embeddings";
    /// Per-tenant rollups.
    pub const ANALYTICS_ROLLUP: &str = "analytics-rollup";
}

/// Topic names of the pipeline.
pub mod topics {
    /// Documents accepted by ingest.
    pub const DOC_UPLOADED: &str = "doc.uploaded";
    /// Stage results.
    pub const DOC_PROCESSED: &str = "doc.processed";

    /// Partitions of `doc.uploaded`: the ceiling of consumer replicas per group.
    pub const DOC_UPLOADED_PARTITIONS: i32 = 12;
    /// Partitions of `doc.processed`.
    pub const DOC_PROCESSED_PARTITIONS: i32 = 6;

    /// A topic of the pipeline and its partition count.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct TopicDef {
        /// Topic name.
        pub name: &'static str,
        /// Partitions: the ceiling of consumer replicas per group.
        pub partitions: i32,
    }

    /// Every topic of the pipeline, in one table: `docflow topics create`, the stack harness,
    /// the benchmarks and the stages' own `ensure_topics` read it (and infra/ later).
    /// Dead-letter topics (`<topic>.dlq.<group>`, one partition) are created by the runtime.
    pub const TABLE: &[TopicDef] = &[
        TopicDef {
            name: DOC_UPLOADED,
            partitions: DOC_UPLOADED_PARTITIONS,
        },
        TopicDef {
            name: DOC_PROCESSED,
            partitions: DOC_PROCESSED_PARTITIONS,
        },
    ];

    /// The partition count of pipeline topic `name` in [`TABLE`] (`None` for other topics).
    pub fn partitions(name: &str) -> Option<i32> {
        TABLE.iter().find(|t| t.name == name).map(|t| t.partitions)
    }

    /// The dead-letter topic of `group` for records of `topic`: `<topic>.dlq.<group>`.
    pub fn dead_letter(topic: &str, group: &str) -> String {
        format!("{topic}.dlq.{group}")
    }

    /// The registry subject of a topic's values (Confluent TopicNameStrategy).
    pub fn value_subject(topic: &str) -> String {
        format!("{topic}-value")
    }
}
