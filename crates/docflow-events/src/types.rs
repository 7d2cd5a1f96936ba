//! Rust types of the topic values. Field names and order follow the `.avsc` files; the tests
//! below prove every value round-trips through the embedded schema.

use std::sync::OnceLock;

use apache_avro::Schema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::schema::{Event, SchemaError, parse_once};
use crate::topics;

/// The document id: lowercase hex SHA-256 of the document bytes.
pub fn document_id(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The idempotency key of a stage's result: lowercase hex SHA-256 of the document bytes, the
/// stage name and the stage version (decimal), each followed by a NUL separator. Replaying a
/// document through the same stage version yields the same key, so nothing is written twice;
/// a fixed stage ships a new version and writes under new keys.
pub fn idempotency_key(bytes: &[u8], stage: &str, stage_version: i32) -> String {
    stage_keys(bytes, stage, stage_version).1
}

/// The document id and a stage's idempotency key of `bytes` in one pass over them (a stage
/// needs both: the id to check the bytes, the key to name its result).
pub fn stage_keys(bytes: &[u8], stage: &str, stage_version: i32) -> (String, String) {
    let mut h = Sha256::new();
    h.update(bytes);
    let document = hex::encode(h.clone().finalize());
    h.update([0]);
    h.update(stage.as_bytes());
    h.update([0]);
    h.update(stage_version.to_string().as_bytes());
    (document, hex::encode(h.finalize()))
}

/// Whether `id` has the shape of a document id (64 lowercase hex characters).
pub fn is_document_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Value of `doc.uploaded`: a document was accepted and its bytes are durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocUploaded {
    /// Lowercase hex SHA-256 of the bytes.
    pub document_id: String,
    /// Uploading tenant.
    pub tenant_id: String,
    /// Object-store URI of the bytes.
    pub object_uri: String,
    /// Sniffed MIME type.
    pub content_type: String,
    /// Size in bytes.
    pub size_bytes: i64,
    /// File name given by the uploader.
    pub original_file_name: Option<String>,
    /// Acceptance time, Unix milliseconds.
    pub uploaded_at: i64,
    /// Producing component and version.
    pub producer_version: String,
}

/// How a stage ended with a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The result is stored.
    #[serde(rename = "OK")]
    Ok,
    /// The stage failed for this document.
    #[serde(rename = "FAILED")]
    Failed,
    /// The record went to the group's dead-letter topic.
    #[serde(rename = "DEAD_LETTERED")]
    DeadLettered,
}

/// Value of `doc.processed`: a stage finished with a document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocProcessed {
    /// Lowercase hex SHA-256 of the bytes.
    pub document_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Stage name.
    pub stage: String,
    /// Stage logic version.
    pub stage_version: i32,
    /// How it ended.
    pub outcome: Outcome,
    /// Reference to the stored result.
    pub result_ref: Option<String>,
    /// Time spent, milliseconds.
    pub duration_ms: i64,
    /// Finish time, Unix milliseconds.
    pub finished_at: i64,
}

static DOC_UPLOADED_SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
static DOC_PROCESSED_SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();

impl Event for DocUploaded {
    const TOPIC: &'static str = topics::DOC_UPLOADED;
    const SCHEMA_JSON: &'static str = include_str!("../../../schemas/doc.uploaded/v1.avsc");

    fn schema() -> Result<&'static Schema, SchemaError> {
        parse_once(&DOC_UPLOADED_SCHEMA, "DocUploaded", Self::SCHEMA_JSON)
    }
}

impl Event for DocProcessed {
    const TOPIC: &'static str = topics::DOC_PROCESSED;
    const SCHEMA_JSON: &'static str = include_str!("../../../schemas/doc.processed/v1.avsc");

    fn schema() -> Result<&'static Schema, SchemaError> {
        parse_once(&DOC_PROCESSED_SCHEMA, "DocProcessed", Self::SCHEMA_JSON)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec::{decode_body, encode_body};
    use crate::schema::{check_history, load_history};
    use crate::{CompatibilityLevel, topics};
    use proptest::prelude::*;

    pub(crate) fn arb_uploaded() -> impl Strategy<Value = DocUploaded> {
        (
            "[0-9a-f]{64}",
            "\\PC{0,24}",
            "\\PC{0,64}",
            "[a-z]{1,12}/[a-z0-9.+-]{1,16}",
            any::<i64>(),
            proptest::option::of("\\PC{0,40}"),
            any::<i64>(),
            "\\PC{0,20}",
        )
            .prop_map(|(id, t, uri, ct, size, name, at, pv)| DocUploaded {
                document_id: id,
                tenant_id: t,
                object_uri: uri,
                content_type: ct,
                size_bytes: size,
                original_file_name: name,
                uploaded_at: at,
                producer_version: pv,
            })
    }

    pub(crate) fn arb_processed() -> impl Strategy<Value = DocProcessed> {
        (
            "[0-9a-f]{64}",
            "\\PC{0,24}",
            "[a-z-]{1,20}",
            any::<i32>(),
            prop_oneof![
                Just(Outcome::Ok),
                Just(Outcome::Failed),
                Just(Outcome::DeadLettered)
            ],
            proptest::option::of("\\PC{0,40}"),
            any::<i64>(),
            any::<i64>(),
        )
            .prop_map(|(id, t, stage, v, o, r, d, f)| DocProcessed {
                document_id: id,
                tenant_id: t,
                stage,
                stage_version: v,
                outcome: o,
                result_ref: r,
                duration_ms: d,
                finished_at: f,
            })
    }

    proptest! {
        #[test]
        fn doc_uploaded_round_trips(ev in arb_uploaded()) {
            let body = encode_body(&ev).unwrap();
            let back: DocUploaded = decode_body(DocUploaded::schema().unwrap(), &body).unwrap();
            prop_assert_eq!(back, ev);
        }

        #[test]
        fn doc_processed_round_trips(ev in arb_processed()) {
            let body = encode_body(&ev).unwrap();
            let back: DocProcessed = decode_body(DocProcessed::schema().unwrap(), &body).unwrap();
            prop_assert_eq!(back, ev);
        }

        #[test]
        fn decoding_garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_body::<DocUploaded>(DocUploaded::schema().unwrap(), &bytes);
            let _ = decode_body::<DocProcessed>(DocProcessed::schema().unwrap(), &bytes);
        }
    }

    #[test]
    fn document_id_is_hex_sha256() {
        let id = document_id(b"abc");
        assert_eq!(
            id,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_document_id(&id));
        assert!(!is_document_id("ABC"));
        assert!(!is_document_id(&id.to_uppercase()));
    }

    #[test]
    fn idempotency_key_separates_bytes_stage_and_version() {
        let k = idempotency_key(b"doc", "thumbnails", 1);
        // sha256("doc\0thumbnails\01")
        let mut h = Sha256::new();
        h.update(b"doc\x00thumbnails\x001");
        assert_eq!(k, hex::encode(h.finalize()));
        assert_eq!(k, idempotency_key(b"doc", "thumbnails", 1));
        assert_ne!(k, idempotency_key(b"doc", "thumbnails", 2));
        assert_ne!(k, idempotency_key(b"doc", "ocr-embeddings", 1));
        assert_eq!(
            stage_keys(b"doc", "thumbnails", 1),
            (document_id(b"doc"), k.clone())
        );
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            idempotency_key(b"ab", "c", 1),
            idempotency_key(b"a", "bc", 1)
        );
    }

    /// The embedded schema of each type is the newest file on disk, and the on-disk history
    /// is BACKWARD_TRANSITIVE compatible (the CI check of the contract).
    #[test]
    fn embedded_schemas_are_newest_and_history_is_backward_transitive() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas");
        let histories = load_history(std::path::Path::new(dir)).unwrap();
        let newest = |topic: &str| {
            let h = histories.iter().find(|h| h.topic == topic).unwrap();
            Schema::parse_str(&h.versions.last().unwrap().1).unwrap()
        };
        assert_eq!(
            &newest(topics::DOC_UPLOADED),
            DocUploaded::schema().unwrap()
        );
        assert_eq!(
            &newest(topics::DOC_PROCESSED),
            DocProcessed::schema().unwrap()
        );
        check_history(&histories, CompatibilityLevel::BackwardTransitive).unwrap();
    }

    #[test]
    fn history_check_catches_a_breaking_version() {
        let dir = tempfile_dir();
        let t = dir.join("t");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(
            t.join("v1.avsc"),
            r#"{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}"#,
        )
        .unwrap();
        std::fs::write(
            t.join("v2.avsc"),
            r#"{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"b","type":"int"}]}"#,
        )
        .unwrap();
        let h = load_history(&dir).unwrap();
        let err = check_history(&h, CompatibilityLevel::BackwardTransitive).unwrap_err();
        assert!(err.to_string().contains("t v2"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "docflow-schema-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
