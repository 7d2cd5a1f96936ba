//! The event codec (schema_registry_converter + apache-avro) against the real registry.

use std::time::Duration;

use docflow_events::codec::{CodecError, encode_body};
use docflow_events::wire::{self, WireError};
use docflow_events::{DocProcessed, DocUploaded, EventCodec, Outcome, document_id};
use schema_registry_converter::async_impl::schema_registry::{SrSettings, get_schema_by_subject};
use schema_registry_converter::schema_registry_common::SubjectNameStrategy;

use crate::support::Harness;

pub fn sample_uploaded(bytes: &[u8]) -> DocUploaded {
    DocUploaded {
        document_id: document_id(bytes),
        tenant_id: "tenant-a".into(),
        object_uri: "file:///tmp/objects/x".into(),
        content_type: "application/pdf".into(),
        size_bytes: i64::try_from(bytes.len()).unwrap(),
        original_file_name: Some("r\u{e9}sum\u{e9}.pdf".into()),
        uploaded_at: 1_780_000_000_123,
        producer_version: "docflow-test/0".into(),
    }
}

#[tokio::test]
async fn encode_decode_through_the_registry() {
    for h in Harness::all().await {
        let codec = EventCodec::from_url(&h.registry.url(), Duration::from_secs(5)).unwrap();
        let ev = sample_uploaded(b"%PDF-1.4 hello");
        let bytes = codec.encode(&ev).await.unwrap();
        let frame = wire::parse(&bytes).unwrap();
        assert_eq!(bytes[0], 0);
        // The id in the frame is the one the registry holds for doc.uploaded-value.
        let settings = SrSettings::new(h.registry.url());
        let registered = get_schema_by_subject(
            &settings,
            &SubjectNameStrategy::TopicNameStrategy("doc.uploaded".into(), false),
        )
        .await
        .unwrap();
        assert_eq!(registered.id, frame.schema_id);
        let back: DocUploaded = codec.decode(&bytes).await.unwrap();
        assert_eq!(back, ev);

        let processed = DocProcessed {
            document_id: ev.document_id.clone(),
            tenant_id: ev.tenant_id.clone(),
            stage: "thumbnails".into(),
            stage_version: 3,
            outcome: Outcome::DeadLettered,
            result_ref: None,
            duration_ms: 17,
            finished_at: 1_780_000_000_999,
        };
        let pbytes = codec.encode(&processed).await.unwrap();
        assert_ne!(wire::parse(&pbytes).unwrap().schema_id, frame.schema_id);
        assert_eq!(
            codec.decode::<DocProcessed>(&pbytes).await.unwrap(),
            processed
        );

        // A second codec (a fresh process) decodes with only the id to go on.
        let other = EventCodec::from_url(&h.registry.url(), Duration::from_secs(5)).unwrap();
        assert_eq!(other.decode::<DocUploaded>(&bytes).await.unwrap(), ev);
        h.finish().await;
    }
}

#[tokio::test]
async fn bad_records_give_typed_errors() {
    let h = Harness::start(docflow_store::scratch::ScratchDb::sqlite().unwrap()).await;
    let codec = EventCodec::from_url(&h.registry.url(), Duration::from_secs(5)).unwrap();
    let ev = sample_uploaded(b"x");
    let good = codec.encode(&ev).await.unwrap();
    let id = wire::parse(&good).unwrap().schema_id;

    let err = codec.decode::<DocUploaded>(b"").await.unwrap_err();
    assert!(
        matches!(err, CodecError::Wire(WireError::Truncated { len: 0 })),
        "{err}"
    );
    assert!(err.is_permanent());

    let mut bad_magic = good.clone();
    bad_magic[0] = 7;
    let err = codec.decode::<DocUploaded>(&bad_magic).await.unwrap_err();
    assert!(
        matches!(err, CodecError::Wire(WireError::BadMagic { found: 7 })),
        "{err}"
    );

    let unknown = wire::frame(9_999, &encode_body(&ev).unwrap());
    let err = codec.decode::<DocUploaded>(&unknown).await.unwrap_err();
    assert!(matches!(err, CodecError::UnknownSchemaId(9_999)), "{err}");
    assert!(err.is_permanent());
    assert_eq!(err.class(), "unknown_schema_id");

    let garbage = wire::frame(
        id,
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    );
    let err = codec.decode::<DocUploaded>(&garbage).await.unwrap_err();
    assert!(matches!(err, CodecError::Body { .. }), "{err}");

    let truncated = &good[..good.len() - 3];
    let err = codec.decode::<DocUploaded>(truncated).await.unwrap_err();
    assert!(matches!(err, CodecError::Body { .. }), "{err}");

    let mut trailing = good.clone();
    trailing.extend_from_slice(b"xyz");
    let err = codec.decode::<DocUploaded>(&trailing).await.unwrap_err();
    assert!(
        matches!(err, CodecError::TrailingBytes { extra: 3, .. }),
        "{err}"
    );

    // A doc.processed record read as doc.uploaded: writer and reader schemas do not resolve.
    let processed = DocProcessed {
        document_id: ev.document_id.clone(),
        tenant_id: "t".into(),
        stage: "s".into(),
        stage_version: 1,
        outcome: Outcome::Ok,
        result_ref: Some("r".into()),
        duration_ms: 1,
        finished_at: 2,
    };
    let pbytes = codec.encode(&processed).await.unwrap();
    let err = codec.decode::<DocUploaded>(&pbytes).await.unwrap_err();
    assert!(matches!(err, CodecError::Body { .. }), "{err}");

    // Registry gone: a retriable registry error, not a permanent one.
    let url = h.registry.url();
    h.finish().await;
    let fresh = EventCodec::from_url(&url, Duration::from_secs(2)).unwrap();
    let err = fresh.decode::<DocUploaded>(&good).await.unwrap_err();
    assert!(matches!(err, CodecError::Registry { .. }), "{err}");
    assert!(!err.is_permanent(), "{err}");
}

/// A producer whose doc.uploaded schema takes a shared record type by reference (Confluent
/// users keep common types in their own subjects): the codec fetches the reference and
/// decodes, skipping the field docflow does not read.
#[tokio::test]
async fn decodes_records_whose_writer_schema_has_references() {
    use apache_avro::types::Value as Avro;
    use apache_avro::writer::datum::GenericDatumWriter;
    use serde_json::json;

    let h = Harness::start(docflow_store::scratch::ScratchDb::sqlite().unwrap()).await;
    let meta = json!({"type": "record", "name": "Meta", "namespace": "io.docflow.test",
        "fields": [{"name": "source", "type": "string"}]});
    let (s, _) = h.register("shared-meta", &meta).await;
    assert_eq!(s, 200);
    let mut writer: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../schemas/doc.uploaded/v1.avsc"
        ))
        .unwrap(),
    )
    .unwrap();
    writer["fields"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "meta", "type": "io.docflow.test.Meta"}));
    let (s, body) = h
        .send(
            "POST",
            "/subjects/uploads-with-meta-value/versions",
            json!({"schema": writer.to_string(),
                   "references": [{"name": "io.docflow.test.Meta", "subject": "shared-meta", "version": 1}]}),
        )
        .await;
    assert_eq!(s, 200, "{body}");
    let id = u32::try_from(body["id"].as_i64().unwrap()).unwrap();

    let ev = sample_uploaded(b"with a reference");
    let schema =
        docflow_registry::references::parse_with(&writer.to_string(), &[meta.to_string()]).unwrap();
    let value = Avro::Record(vec![
        ("document_id".into(), Avro::String(ev.document_id.clone())),
        ("tenant_id".into(), Avro::String(ev.tenant_id.clone())),
        ("object_uri".into(), Avro::String(ev.object_uri.clone())),
        ("content_type".into(), Avro::String(ev.content_type.clone())),
        ("size_bytes".into(), Avro::Long(ev.size_bytes)),
        (
            "original_file_name".into(),
            Avro::Union(
                1,
                Box::new(Avro::String(ev.original_file_name.clone().unwrap())),
            ),
        ),
        ("uploaded_at".into(), Avro::TimestampMillis(ev.uploaded_at)),
        (
            "producer_version".into(),
            Avro::String(ev.producer_version.clone()),
        ),
        (
            "meta".into(),
            Avro::Record(vec![("source".into(), Avro::String("scanner-7".into()))]),
        ),
    ]);
    let body = GenericDatumWriter::builder(&schema)
        .build()
        .unwrap()
        .write_value_to_vec(value)
        .unwrap();
    let codec = EventCodec::from_url(&h.registry.url(), Duration::from_secs(5)).unwrap();
    let back: DocUploaded = codec.decode(&wire::frame(id, &body)).await.unwrap();
    assert_eq!(back, ev);
    h.finish().await;
}
