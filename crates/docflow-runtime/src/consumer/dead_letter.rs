//! Dead-letter writing: a record that failed for good goes to `<topic>.dlq.<group>` before
//! its offset may be stored.

use std::time::Duration;

use rdkafka::producer::FutureRecord;
use tracing::Instrument;

use crate::dlq;
use crate::handler::{Handler, HandlerError, Record};
use crate::metrics::MessageOutcome;

use super::worker::abandoned;
use super::{Outcome, Shared};

/// Writes `record` (key and value unchanged, provenance headers) to its dead-letter topic,
/// then tells the handler. A failed write is retried with backoff until it succeeds or the
/// consumer stops: the record's offset is not passed before the DLQ has it.
///
/// The write is a publish span of its own, child of the record's work (the consume span);
/// with span export on, the dead letter's `traceparent` names it, so the upload's trace
/// ends at its dead letter and a redrive continues it.
pub(super) async fn dead_letter<H: Handler>(
    s: &Shared<H>,
    record: &Record,
    input: Option<&H::Input>,
    e: &HandlerError,
) -> Outcome {
    let topic = dlq::topic_for(&record.topic, &s.group);
    let (span, trace) = crate::trace::publish_span(&topic, record.key.as_deref(), &record.trace);
    span.record("docflow.dlq.error_class", e.class());
    // The span covers the write (and its retries) only; the handler's hook runs after it.
    if !write(s, record, e, &topic, &trace)
        .instrument(span.clone())
        .await
    {
        span.record("otel.status_code", "error");
        return abandoned(s);
    }
    drop(span);
    s.handler.dead_lettered(record, input, e).await;
    Outcome::Done
}

/// Writes the dead letter, retrying until it is written (`true`) or the consumer stops
/// (`false`: nothing was written).
async fn write<H: Handler>(
    s: &Shared<H>,
    record: &Record,
    e: &HandlerError,
    topic: &str,
    trace: &crate::trace::TraceContext,
) -> bool {
    let headers = dlq::dead_letter_headers(record, trace, &s.group, e, record.attempt);
    let mut failures = 0u32;
    loop {
        let mut fr: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(headers.clone());
        if let Some(k) = &record.key {
            fr = fr.key(k.as_slice());
        }
        if let Some(p) = &record.payload {
            fr = fr.payload(p.as_slice());
        }
        match s.producer.send(fr, Duration::from_secs(30)).await {
            Ok(_) => {
                s.metrics.message(&s.group, MessageOutcome::DeadLettered);
                tracing::warn!(class = e.class(), error = e.message(), dlq = %topic, attempts = record.attempt, "dead-lettered");
                return true;
            }
            Err((err, _)) => {
                failures += 1;
                s.metrics.dlq_write_error(&s.group);
                let delay = s.retry.delay(failures);
                tracing::error!(error = %err, dlq = %topic, ?delay, "dead-letter write failed; the partition waits");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {},
                    () = s.cancel.cancelled() => return false,
                }
            }
        }
    }
}
