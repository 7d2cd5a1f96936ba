//! The workers: one tokio task per record, at most `workers` running a handler at a time
//! (the execution semaphore), each reporting its outcome back to the poll thread.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::handler::{Handler, HandlerError, Record, class};
use crate::ledger::{CRASH_LOOP, Claimed, Death, DeliveryKey, UNSEEN_FACTOR};
use crate::metrics::MessageOutcome;

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
    /// The record was in hand when a process died: run it alone.
    Suspect(Claimed),
    /// It killed its process while running alone `--max-crash-deliveries` times:
    /// dead-letter it unrun.
    CrashLoop(Claimed),
}

/// Decode, then handle until done or out of transient retries; a record that fails for good
/// goes to the dead-letter topic. Holds a worker slot only while decoding and handling, so
/// records waiting out a retry delay do not hold up others. With a ledger, the delivery is
/// recorded (`claimed`) before anything runs; a suspect waits for every slot before each
/// attempt and holds them until the attempt's outcome.
async fn process<H: Handler>(s: &Shared<H>, record: &mut Record, claimed: &mut bool) -> Outcome {
    let group = s.group.as_str();
    // A dead letter of another group sent back to the topic (`docflow replay dlq`): not ours.
    if crate::dlq::redrive_group(record).is_some_and(|g| g != group) {
        s.metrics.message(group, MessageOutcome::OtherGroup);
        return Outcome::Done;
    }
    // Decoded once per delivery: retries and the dead-letter hook reuse it.
    let mut input: Option<H::Input> = None;
    // Set once the ledger says a process died with this record in hand.
    let mut suspect: Option<Claimed> = None;
    // Every slot, kept through a retry delay when the ledger could not be told the
    // suspect lets the others run: it still runs alone.
    let mut kept: Option<OwnedSemaphorePermit> = None;
    loop {
        let mut alone = kept.is_some();
        let permit = match kept.take() {
            Some(all) => all,
            None => {
                let permit = tokio::select! {
                    p = s.exec.clone().acquire_owned() => p,
                    () = s.cancel.cancelled() => return abandoned(s),
                };
                let Ok(permit) = permit else {
                    return abandoned(s);
                };
                permit
            }
        };
        let mut permit = Some(permit);
        let mut started = Instant::now();
        let mut result = match claim(s, record, claimed).await {
            Err(e) => Err(e),
            Ok(Claim::CrashLoop(c)) => {
                drop(permit);
                return crash_loop(s, record, c).await;
            }
            Ok(Claim::Suspect(c)) => {
                suspect = Some(c);
                Ok(())
            }
            Ok(Claim::Run) => Ok(()),
        };
        if result.is_ok()
            && !alone
            && let Some(c) = suspect
        {
            drop(permit.take());
            match run_alone(s, record, c).await {
                Ok(Some(all)) => {
                    permit = Some(all);
                    alone = true;
                    started = Instant::now();
                }
                Ok(None) => return abandoned(s),
                Err(e) => result = Err(e),
            }
        }
        let result = match result {
            Err(e) => Err(e),
            Ok(()) => {
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
        s.metrics
            .observe_handler(group, started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                s.metrics.message(group, MessageOutcome::Ok);
                return Outcome::Done;
            }
            Err(HandlerError::Transient { class, message })
                if s.retry.may_retry(record.attempt) =>
            {
                s.metrics.message(group, MessageOutcome::Retried);
                let delay = s.retry.delay(record.attempt);
                tracing::warn!(%class, %message, attempt = record.attempt, ?delay, "transient failure; retrying");
                // A suspect lets the other records run while it waits, once the ledger no
                // longer says it runs alone (else it keeps every slot through the delay).
                if alone && !not_alone(s, record).await {
                    kept = permit;
                } else {
                    drop(permit);
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {},
                    () = s.cancel.cancelled() => return abandoned(s),
                }
                record.attempt += 1;
            }
            Err(e) => {
                drop(permit);
                return dead_letter(s, record, input.as_ref(), &e).await;
            }
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
    let c = ledger
        .claim(&key_of(s, record), crate::supervise::life())
        .await
        .map_err(|e| HandlerError::transient(class::LEDGER, e))?;
    *claimed = true;
    Ok(
        if c.convicting >= *max || c.alone >= max.saturating_mul(UNSEEN_FACTOR) {
            Claim::CrashLoop(c)
        } else if c.deaths > 0 {
            Claim::Suspect(c)
        } else {
            Claim::Run
        },
    )
}

/// Waits until the suspect holds every execution slot — the records in flight finish, and
/// none starts beside it — then tells the ledger it runs alone. `Ok(None)`: shutdown came
/// first.
async fn run_alone<H>(
    s: &Shared<H>,
    record: &Record,
    c: Claimed,
) -> Result<Option<OwnedSemaphorePermit>, HandlerError> {
    tracing::warn!(
        offset = record.offset,
        partition = record.partition,
        deaths = c.deaths,
        deaths_alone = c.alone,
        "a suspect: the record was in hand when a process died; it runs alone"
    );
    let all = tokio::select! {
        p = s.exec.clone().acquire_many_owned(s.workers) => p,
        () = s.cancel.cancelled() => return Ok(None),
    };
    let Ok(all) = all else {
        return Ok(None);
    };
    if let Some((ledger, _)) = &s.ledger {
        ledger
            .set_alone(&key_of(s, record), crate::supervise::life(), true)
            .await
            .map_err(|e| HandlerError::transient(class::LEDGER, e))?;
    }
    s.metrics.suspect_run(&s.group);
    Ok(Some(all))
}

/// Tells the ledger a suspect no longer runs alone (it lets the slots go for a retry
/// delay); `false` if that could not be recorded.
async fn not_alone<H>(s: &Shared<H>, record: &Record) -> bool {
    let Some((ledger, _)) = &s.ledger else {
        return true;
    };
    match ledger
        .set_alone(&key_of(s, record), crate::supervise::life(), false)
        .await
    {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, offset = record.offset, "could not record that a suspect lets the others run; it keeps every slot");
            false
        }
    }
}

/// Dead-letters a record that killed its process while running alone, without handling
/// it, naming the deaths; it is decoded (docflow's own bounded decoder) only so the
/// dead-letter hook can record the outcome.
async fn crash_loop<H: Handler>(s: &Shared<H>, record: &Record, c: Claimed) -> Outcome {
    let input = s.handler.decode(record).await.ok();
    let deaths = match &s.ledger {
        Some((ledger, _)) => ledger.deaths(&key_of(s, record)).await.unwrap_or_default(),
        None => Vec::new(),
    };
    let error = HandlerError::permanent(CRASH_LOOP, crash_loop_message(c, &deaths));
    tracing::error!(
        offset = record.offset,
        partition = record.partition,
        deliveries = c.deliveries,
        deaths = c.deaths,
        deaths_alone = c.convicting,
        "crash loop"
    );
    dead_letter(s, record, input.as_ref(), &error).await
}

/// The crash-loop verdict with its evidence: the deaths while alone, each with how its
/// process ended, and how many other deaths came before or beside them.
fn crash_loop_message(c: Claimed, deaths: &[Death]) -> String {
    use std::fmt::Write;
    let mut m = format!(
        "delivered {} times: the process died {} times while this record ran alone, {} of \
         them of its own fault; dead-lettered without running the handler",
        c.deliveries, c.alone, c.convicting
    );
    let (alone, others): (Vec<&Death>, Vec<&Death>) = deaths.iter().partition(|d| d.alone);
    for (i, d) in alone.iter().enumerate() {
        let cause: String = d
            .cause
            .as_deref()
            .unwrap_or("nobody saw how it ended")
            .chars()
            .take(240)
            .collect();
        let _ = write!(m, "; death {} alone (life {}): {cause}", i + 1, d.life);
    }
    if let Some(most) = others.iter().map(|d| d.in_hand).max() {
        let _ = write!(
            m,
            "; {} more deaths not counted (with other records in hand: up to {most})",
            others.len()
        );
    }
    m
}

/// Tells the ledger how the delivery ended (best effort: a stale entry only counts against
/// a record that is never delivered again).
async fn release<H>(s: &Shared<H>, record: &Record, outcome: Outcome) {
    if let Some((ledger, _)) = &s.ledger
        && let Err(e) = ledger
            .release(
                &key_of(s, record),
                crate::supervise::life(),
                outcome == Outcome::Done,
            )
            .await
    {
        tracing::warn!(error = %e, offset = record.offset, "releasing the delivery claim failed");
    }
}

/// Counts a record given up on (shutdown): it will be redelivered.
/// A handler stopped mid-run at shutdown: redelivered later, its claim released as for an
/// abandoned record.
fn interrupted<H>(s: &Shared<H>, record: &Record) -> Outcome {
    s.metrics.message(&s.group, MessageOutcome::Interrupted);
    tracing::warn!(
        offset = record.offset,
        partition = record.partition,
        "shutdown grace period over: handler interrupted; the record will be redelivered"
    );
    Outcome::Abandoned
}

pub(super) fn abandoned<H>(s: &Shared<H>) -> Outcome {
    s.metrics.message(&s.group, MessageOutcome::Abandoned);
    Outcome::Abandoned
}
