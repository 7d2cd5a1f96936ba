//! The producer every docflow output goes through: idempotent (`enable.idempotence=true`,
//! which implies `acks=all` and bounded in-flight requests), so a retried send never writes a
//! duplicate, and a send is only acknowledged once every in-sync replica has it.

use docflow_config::KafkaArgs;
use rdkafka::producer::FutureProducer;

use crate::RuntimeError;

/// Builds the idempotent producer. `client_id` names the service in broker logs.
pub fn idempotent_producer(
    kafka: &KafkaArgs,
    client_id: &str,
) -> Result<FutureProducer, RuntimeError> {
    let mut cfg = kafka.client_config(client_id);
    // Defaults first; anything given with -X on the command line already won above, so only
    // set what the operator did not.
    for (k, v) in [
        ("enable.idempotence", "true"),
        ("acks", "all"),
        ("linger.ms", "5"),
        ("compression.type", "lz4"),
        ("message.timeout.ms", "30000"),
    ] {
        if !kafka.options.iter().any(|(key, _)| key == k) {
            cfg.set(k, v);
        }
    }
    cfg.create()
        .map_err(RuntimeError::kafka("creating producer"))
}

/// Why an event could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Encoding through the registry failed (a permanent codec error or an unreachable registry).
    #[error("encoding the event: {0}")]
    Encode(#[from] docflow_events::CodecError),
    /// The broker did not acknowledge the record in time.
    #[error("producing to {topic}: {source}")]
    Produce {
        /// The topic.
        topic: String,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// Encoding and the broker's ack together took longer than the caller's timeout. The
    /// record may still be delivered later (librdkafka keeps it until `message.timeout.ms`);
    /// a retry of the same event is what the idempotent effects downstream absorb.
    #[error("producing to {topic}: no acknowledgement within {after:?}")]
    Timeout {
        /// The topic.
        topic: String,
        /// The timeout that ran out.
        after: std::time::Duration,
    },
}

/// Encodes `event` through the registry (Confluent wire format) and sends it to `topic` with
/// key `key` and `trace` as its `traceparent` header; returns once the broker acknowledged it.
/// Every event docflow produces goes through here: ingest's `doc.uploaded`, the stages'
/// `doc.processed`.
///
/// `timeout` bounds the whole call: the registry lookup, a full producer queue and the
/// broker's ack. librdkafka's own `message.timeout.ms` is not a bound on its own: with
/// idempotence on, a timed-out record's failure can be held back until the requests in
/// flight before it resolve, which made ingest answer its 503 up to twice the timeout late.
pub async fn send_event<E: docflow_events::Event>(
    producer: &FutureProducer,
    codec: &docflow_events::EventCodec,
    topic: &str,
    key: &str,
    event: &E,
    trace: &crate::trace::TraceContext,
    timeout: std::time::Duration,
) -> Result<(), SendError> {
    tokio::time::timeout(
        timeout,
        send_unbounded(producer, codec, topic, key, event, trace, timeout),
    )
    .await
    .map_err(|_| SendError::Timeout {
        topic: topic.to_owned(),
        after: timeout,
    })?
}

async fn send_unbounded<E: docflow_events::Event>(
    producer: &FutureProducer,
    codec: &docflow_events::EventCodec,
    topic: &str,
    key: &str,
    event: &E,
    trace: &crate::trace::TraceContext,
    timeout: std::time::Duration,
) -> Result<(), SendError> {
    let payload = codec.encode(event).await?;
    let trace = trace.to_string();
    let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
        key: crate::trace::TRACEPARENT,
        value: Some(trace.as_bytes()),
    });
    producer
        .send(
            rdkafka::producer::FutureRecord::to(topic)
                .key(key)
                .payload(&payload)
                .headers(headers),
            timeout,
        )
        .await
        .map(|_| ())
        .map_err(|(source, _)| SendError::Produce {
            topic: topic.to_owned(),
            source,
        })
}
