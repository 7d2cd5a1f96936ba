//! The workers: one tokio task per record, at most `workers` running a handler at a time
//! (the execution semaphore), each reporting its outcome back to the poll thread.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::handler::{Handler, HandlerError, Record, class};
use crate::ledger::{CRASH_LOOP, DeliveryKey};
use crate::metrics::outcome;

use super::dead_letter::dead_letter;
use super::{Completion, Job, Outcome, Shared};

/// Runs one record to its outcome and reports it to the poll thread.
pub(super) async fn work<H: Handler>(s: Arc<Shared<H>>, job: Job) {
    let Job { mut record, epoch } = job;
    let span = tracing::info_span!(
        "docflow.consume",
        otel.name = %format!("process {}", record.topic),
        otel.kind = "consumer",
        messaging.system = "kafka",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %record.topic,
        messaging.destination.partition.id = %record.partition,
        messaging.kafka.offset = record.offset,
        messaging.consumer.group.name = %s.group,
        messaging.kafka.message.key = tracing::field::Empty,
        docflow.job_id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    crate::trace::record_key(&span, record.key.as_deref());
    // With span export on, the work's context becomes the exported span's.
    record.trace = crate::trace::adopt(&span, record.trace);
    span.record("trace_id", record.trace.trace_id_hex());
    let mut claimed = false;
    let outcome = process(&s, &mut record, &mut claimed)
        .instrument(span)
        .await;
    if claimed {
        release(&s, &record, outcome).await;
    }
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

/// What the ledger says about a delivery.
enum Claim {
    /// Run the handler.
    Run,
    /// The process died with this record `n - 1` times: dead-letter it unrun.
    CrashLoop(u32),
}

/// Decode, then handle until done or out of transient retries; a record that fails for good
/// goes to the dead-letter topic. Holds a worker slot only while decoding and handling, so
/// records waiting out a retry delay do not hold up others. With a ledger, the delivery is
/// recorded (`claimed`) before anything runs.
async fn process<H: Handler>(s: &Shared<H>, record: &mut Record, claimed: &mut bool) -> Outcome {
    let group = s.group.as_str();
    // A dead letter of another group sent back to the topic (`docflow replay dlq`): not ours.
    if crate::dlq::redrive_group(record).is_some_and(|g| g != group) {
        s.metrics
            .messages
            .with_label_values(&[group, outcome::OTHER_GROUP])
            .inc();
        return Outcome::Done;
    }
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
        let result = match claim(s, record, claimed).await {
            Err(e) => Err(e),
            Ok(Claim::CrashLoop(n)) => {
                drop(permit);
                return crash_loop(s, record, n).await;
            }
            Ok(Claim::Run) => {
                let handled = async {
                    match &input {
                        Some(i) => s.handler.handle(record, i).await,
                        None => match s.handler.decode(record).await {
                            Ok(i) => s.handler.handle(record, input.insert(i)).await,
                            Err(e) => Err(e),
                        },
                    }
                };
                // Past the shutdown grace period the handler is stopped where it is (its
                // side effects are idempotent, its offset is not stored): the process exits
                // having released the claim, so a graceful exit never counts as a death.
                tokio::select! {
                    r = handled => r,
                    () = s.cancel.cancelled() => {
                        drop(permit);
                        return interrupted(s, record);
                    }
                }
            }
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

fn key_of<H>(s: &Shared<H>, record: &Record) -> DeliveryKey {
    DeliveryKey {
        group: s.group.clone(),
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
    }
}

/// Records this delivery in the ledger once (a ledger failure is transient: retried).
async fn claim<H>(
    s: &Shared<H>,
    record: &Record,
    claimed: &mut bool,
) -> Result<Claim, HandlerError> {
    let Some((ledger, max)) = &s.ledger else {
        return Ok(Claim::Run);
    };
    if *claimed {
        return Ok(Claim::Run);
    }
    let n = ledger
        .claim(&key_of(s, record))
        .await
        .map_err(|e| HandlerError::transient(class::LEDGER, e))?;
    *claimed = true;
    Ok(if n > *max {
        Claim::CrashLoop(n)
    } else {
        Claim::Run
    })
}

/// Dead-letters a record whose earlier deliveries took the process down, without handling
/// it; it is decoded (docflow's own bounded decoder) only so the dead-letter hook can
/// record the outcome.
async fn crash_loop<H: Handler>(s: &Shared<H>, record: &Record, n: u32) -> Outcome {
    let input = s.handler.decode(record).await.ok();
    let error = HandlerError::permanent(
        CRASH_LOOP,
        format!(
            "delivered {n} times: the process died with this record in hand {} times; \
             dead-lettered without running the handler",
            n - 1
        ),
    );
    tracing::error!(
        offset = record.offset,
        partition = record.partition,
        deliveries = n,
        "crash loop"
    );
    dead_letter(s, record, input.as_ref(), &error).await
}

/// Tells the ledger how the delivery ended (best effort: a stale entry only counts against
/// a record that is never delivered again).
async fn release<H>(s: &Shared<H>, record: &Record, outcome: Outcome) {
    if let Some((ledger, _)) = &s.ledger
        && let Err(e) = ledger
            .release(&key_of(s, record), outcome == Outcome::Done)
            .await
    {
        tracing::warn!(error = %e, offset = record.offset, "releasing the delivery claim failed");
    }
}

/// Counts a record given up on (shutdown): it will be redelivered.
/// A handler stopped mid-run at shutdown: redelivered later, its claim released as for an
/// abandoned record.
fn interrupted<H>(s: &Shared<H>, record: &Record) -> Outcome {
    s.metrics
        .messages
        .with_label_values(&[&s.group, outcome::INTERRUPTED])
        .inc();
    tracing::warn!(
        offset = record.offset,
        partition = record.partition,
        "shutdown grace period over: handler interrupted; the record will be redelivered"
    );
    Outcome::Abandoned
}

pub(super) fn abandoned<H>(s: &Shared<H>) -> Outcome {
    s.metrics
        .messages
        .with_label_values(&[&s.group, outcome::ABANDONED])
        .inc();
    Outcome::Abandoned
}
