//! The workers: one tokio task per record, at most `workers` running a handler at a time
//! (the execution semaphore), each reporting its outcome back to the poll thread.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::handler::{Handler, HandlerError, Record};
use crate::metrics::outcome;

use super::dead_letter::dead_letter;
use super::{Completion, Job, Outcome, Shared};

/// Runs one record to its outcome and reports it to the poll thread.
pub(super) async fn work<H: Handler>(s: Arc<Shared<H>>, job: Job) {
    let Job { mut record, epoch } = job;
    let span = tracing::info_span!(
        "docflow.consume",
        messaging.system = "kafka",
        messaging.operation = "process",
        messaging.destination.name = %record.topic,
        messaging.kafka.destination.partition = record.partition,
        messaging.kafka.message.offset = record.offset,
        messaging.kafka.consumer.group = %s.group,
        trace_id = %record.trace.trace_id_hex(),
    );
    let outcome = process(&s, &mut record).instrument(span).await;
    let done = Completion {
        tp: (record.topic, record.partition),
        offset: record.offset,
        epoch,
        key: record.key,
        outcome,
    };
    // The poll thread is gone only after shutdown; nothing to report to then.
    let _ = s.done_tx.send(done);
}

/// Decode, then handle until done or out of transient retries; a record that fails for good
/// goes to the dead-letter topic. Holds a worker slot only while decoding and handling, so
/// records waiting out a retry delay do not hold up others.
async fn process<H: Handler>(s: &Shared<H>, record: &mut Record) -> Outcome {
    let group = s.group.as_str();
    // Decoded once per delivery: retries and the dead-letter hook reuse it.
    let mut input: Option<H::Input> = None;
    loop {
        let permit = tokio::select! {
            p = s.exec.clone().acquire_owned() => p,
            () = s.cancel.cancelled() => return abandoned(s),
        };
        let Ok(permit) = permit else {
            return abandoned(s);
        };
        let started = Instant::now();
        let result = match &input {
            Some(i) => s.handler.handle(record, i).await,
            None => match s.handler.decode(record).await {
                Ok(i) => s.handler.handle(record, input.insert(i)).await,
                Err(e) => Err(e),
            },
        };
        drop(permit);
        s.metrics
            .handler_duration
            .with_label_values(&[group])
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                s.metrics
                    .messages
                    .with_label_values(&[group, outcome::OK])
                    .inc();
                return Outcome::Done;
            }
            Err(HandlerError::Transient { class, message })
                if s.retry.may_retry(record.attempt) =>
            {
                s.metrics
                    .messages
                    .with_label_values(&[group, outcome::RETRIED])
                    .inc();
                let delay = s.retry.delay(record.attempt);
                tracing::warn!(%class, %message, attempt = record.attempt, ?delay, "transient failure; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {},
                    () = s.cancel.cancelled() => return abandoned(s),
                }
                record.attempt += 1;
            }
            Err(e) => return dead_letter(s, record, input.as_ref(), &e).await,
        }
    }
}

/// Counts a record given up on (shutdown): it will be redelivered.
pub(super) fn abandoned<H>(s: &Shared<H>) -> Outcome {
    s.metrics
        .messages
        .with_label_values(&[&s.group, outcome::ABANDONED])
        .inc();
    Outcome::Abandoned
}
