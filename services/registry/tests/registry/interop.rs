//! Records docflow produces on a real broker are plain Confluent wire format: an independent
//! consumer decodes them with only the registry's REST API and apache-avro.

use std::collections::HashSet;
use std::time::Duration;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value as Avro;
use docflow_events::EventCodec;
use docflow_runtime::producer::{idempotent_producer, send_event};
use docflow_runtime::trace::TraceContext;
use docflow_stack::{Stack, unique_name};
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};

use crate::codec::sample_uploaded;

#[tokio::test]
async fn produced_records_decode_with_a_plain_confluent_consumer() {
    let stack = Stack::builder().partitions(3).start().await.unwrap();
    let kafka = stack.kafka();
    let codec = EventCodec::from_url(&stack.registry.url(), Duration::from_secs(5)).unwrap();

    // docflow writes doc.uploaded events, but to a random topic name for isolation.
    let topic = stack.topics.uploaded.clone();
    let producer = idempotent_producer(&kafka, "interop-test").unwrap();
    let mut sent = HashSet::new();
    for i in 0..20u32 {
        // Exactly what ingest and the stages produce.
        let ev = sample_uploaded(format!("doc {i}").as_bytes());
        let trace = TraceContext::new_root();
        let timeout = Duration::from_secs(10);
        send_event(
            &producer,
            &codec,
            &topic,
            &ev.document_id,
            &ev,
            &trace,
            timeout,
        )
        .await
        .unwrap();
        sent.insert(ev.document_id);
    }

    // The independent consumer: rdkafka for bytes, reqwest for the schema, apache-avro for
    // the body. No docflow code decodes.
    let consumer: StreamConsumer = kafka
        .client_config("plain-consumer")
        .set("group.id", unique_name("plain"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let http = reqwest::Client::new();
    let mut seen = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < sent.len() {
        let msg = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .expect("timed out reading back")
            .unwrap();
        let payload = msg.payload().unwrap();
        assert_eq!(payload[0], 0, "magic byte");
        let id = u32::from_be_bytes(payload[1..5].try_into().unwrap());
        let body: serde_json::Value = http
            .get(format!("{}/schemas/ids/{id}", stack.registry.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let schema = Schema::parse_str(body["schema"].as_str().unwrap()).unwrap();
        let value = GenericDatumReader::builder(&schema)
            .build()
            .unwrap()
            .read_value(&mut &payload[5..])
            .unwrap();
        let Avro::Record(fields) = value else {
            panic!("not a record: {value:?}")
        };
        let doc_id = fields
            .iter()
            .find(|(k, _)| k == "document_id")
            .map(|(_, v)| match v {
                Avro::String(s) => s.clone(),
                other => panic!("document_id is {other:?}"),
            })
            .unwrap();
        assert_eq!(msg.key(), Some(doc_id.as_bytes()), "key = document id");
        assert!(sent.contains(&doc_id));
        seen.insert(doc_id);
    }
    assert_eq!(seen, sent);
    stack.stop().await.unwrap();
}
