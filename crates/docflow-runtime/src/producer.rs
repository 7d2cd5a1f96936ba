//! The producer every docflow output goes through: idempotent (`enable.idempotence=true`,
//! which implies `acks=all` and bounded in-flight requests), so a retried send never writes a
//! duplicate, and a send is only acknowledged once every in-sync replica has it.

use docflow_config::KafkaArgs;
use rdkafka::producer::FutureProducer;
use tracing::Instrument as _;

use crate::RuntimeError;

/// Builds the idempotent producer. `client_id` names the service in broker logs. A send
/// waits up to 1 ms (`linger.ms=1`) for others to share its batch: for outputs that flow
/// (stage results, dead letters), where a batch of many saves the broker work.
pub fn idempotent_producer(
    kafka: &KafkaArgs,
    client_id: &str,
) -> Result<FutureProducer, RuntimeError> {
    producer(kafka, client_id, "1")
}

/// The idempotent producer for a request path, where a caller waits for each send's ack (an
/// upload's `202`): a send goes to the broker at once (`linger.ms=0`). With `linger.ms=1` a
/// lone send waited that millisecond out before it left: it was 1.1 of the 1.8 ms the send
/// and ack took at p50 on ingest's bench (bench/results/ingest.md). Under load records still
/// share batches: those that arrive while the in-flight requests are out wait together.
pub fn request_producer(
    kafka: &KafkaArgs,
    client_id: &str,
) -> Result<FutureProducer, RuntimeError> {
    producer(kafka, client_id, "0")
}

fn producer(
    kafka: &KafkaArgs,
    client_id: &str,
    linger_ms: &str,
) -> Result<FutureProducer, RuntimeError> {
    config(kafka, client_id, linger_ms)
        .create()
        .map_err(RuntimeError::kafka("creating producer"))
}

fn config(kafka: &KafkaArgs, client_id: &str, linger_ms: &str) -> rdkafka::ClientConfig {
    let mut cfg = kafka.client_config(client_id);
    // Defaults first; anything given with -X on the command line already won above, so only
    // set what the operator did not, under its name or librdkafka's other name for it (with
    // both in the configuration, which one librdkafka applies last is not defined).
    for (k, alias, v) in [
        ("enable.idempotence", None, "true"),
        ("acks", Some("request.required.acks"), "all"),
        // librdkafka's 5 ms default was 10 ms of a 25 ms upload-to-thumbnail answer (two
        // events in series; bench/results/thumbnails.md).
        ("linger.ms", Some("queue.buffering.max.ms"), linger_ms),
        ("compression.type", Some("compression.codec"), "lz4"),
        ("message.timeout.ms", Some("delivery.timeout.ms"), "30000"),
    ] {
        let given = |key: &String| key == k || Some(key.as_str()) == alias;
        if !kafka.options.iter().any(|(key, _)| given(key)) {
            cfg.set(k, v);
        }
    }
    cfg
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
    #[error("producing to {topic}: waiting for the {waiting_for} past the {after:?} timeout")]
    Timeout {
        /// The topic.
        topic: String,
        /// The timeout that ran out.
        after: std::time::Duration,
        /// What the call was waiting for when it ran out: [`WAITING_FOR_REGISTRY`] or
        /// [`WAITING_FOR_BROKER`].
        waiting_for: &'static str,
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
    let deadline = tokio::time::Instant::now() + timeout;
    let timed_out = |waiting_for| SendError::Timeout {
        topic: topic.to_owned(),
        after: timeout,
        waiting_for,
    };
    let (span, trace) = crate::trace::publish_span(topic, Some(key.as_bytes()), trace);
    async move {
        let payload = tokio::time::timeout_at(deadline, codec.encode(event))
            .await
            .map_err(|_| timed_out(WAITING_FOR_REGISTRY))??;
        tokio::time::timeout_at(
            deadline,
            send_encoded(producer, topic, key, &payload, &trace, timeout),
        )
        .await
        .map_err(|_| timed_out(WAITING_FOR_BROKER))?
    }
    .instrument(span)
    .await
}

/// [`SendError::Timeout`] while the schema registry had not answered.
pub const WAITING_FOR_REGISTRY: &str = "schema registry";
/// [`SendError::Timeout`] while the broker had not acknowledged.
pub const WAITING_FOR_BROKER: &str = "broker";

async fn send_encoded(
    producer: &FutureProducer,
    topic: &str,
    key: &str,
    payload: &[u8],
    trace: &crate::trace::TraceContext,
    timeout: std::time::Duration,
) -> Result<(), SendError> {
    let trace = trace.to_string();
    let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
        key: crate::trace::TRACEPARENT,
        value: Some(trace.as_bytes()),
    });
    producer
        .send(
            rdkafka::producer::FutureRecord::to(topic)
                .key(key)
                .payload(payload)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_producers_send_at_once_and_operators_keep_the_last_word() {
        let mut kafka = KafkaArgs::plaintext("127.0.0.1:9092");
        assert_eq!(config(&kafka, "x", "1").get("linger.ms"), Some("1"));
        assert_eq!(config(&kafka, "x", "0").get("linger.ms"), Some("0"));
        let cfg = config(&kafka, "x", "0");
        assert_eq!(cfg.get("enable.idempotence"), Some("true"));
        assert_eq!(cfg.get("acks"), Some("all"));
        // `-X linger.ms=5` wins over either default.
        kafka.options.push(("linger.ms".into(), "5".into()));
        assert_eq!(config(&kafka, "x", "0").get("linger.ms"), Some("5"));
        assert_eq!(config(&kafka, "x", "1").get("linger.ms"), Some("5"));
        // So does librdkafka's other name for it, which is then the only one set.
        let mut aliased = KafkaArgs::plaintext("127.0.0.1:9092");
        aliased
            .options
            .push(("queue.buffering.max.ms".into(), "7".into()));
        aliased
            .options
            .push(("request.required.acks".into(), "1".into()));
        let cfg = config(&aliased, "x", "0");
        assert_eq!(cfg.get("queue.buffering.max.ms"), Some("7"));
        assert_eq!(cfg.get("linger.ms"), None);
        assert_eq!(cfg.get("request.required.acks"), Some("1"));
        assert_eq!(cfg.get("acks"), None);
        assert_eq!(cfg.get("compression.type"), Some("lz4"));
        // Both build (no broker is contacted until a send).
        assert!(request_producer(&kafka, "x").is_ok());
        assert!(idempotent_producer(&kafka, "x").is_ok());
    }
}
