//! The handler: decode a record into a [`Fact`], hand it to the batcher, return once the
//! transaction that counted it (or found it counted) has committed. The runtime then stores
//! the offset, as for any handler: the database is ahead of Kafka, never behind.
//!
//! The batcher is one task per replica: it takes every record waiting (up to `--batch-max`,
//! optionally lingering `--batch-linger` for more) and counts them in one transaction
//! ([`Analytics::apply`]). While a transaction commits, the next batch gathers, so under
//! load batches grow by themselves and at rest a record waits for nobody. A batch that fails
//! for another reason than the database being unavailable is retried record by record, so
//! one record the database refuses cannot fail its batch-mates.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use docflow_events::{DocProcessed, DocUploaded, EventCodec, Outcome};
use docflow_runtime::handler::class;
use docflow_runtime::positions::{PositionError, PositionFuture, TopicPartition};
use docflow_runtime::{Handler, HandlerError, PositionStore, Record};
use docflow_store::{Analytics, Applied, Delivery, Fact, StoreError};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// A decoded record.
#[derive(Debug, Clone)]
pub enum Input {
    /// From the uploads topic.
    Uploaded(DocUploaded),
    /// From the stage results topic.
    Processed(DocProcessed),
}

impl Input {
    fn tenant(&self) -> &str {
        match self {
            Input::Uploaded(e) => &e.tenant_id,
            Input::Processed(e) => &e.tenant_id,
        }
    }
}

/// Which input a record came from: the `input` label of `docflow_analytics_records_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordInput {
    /// The uploads topic (`uploaded`).
    Uploaded,
    /// The stage results topic (`processed`).
    Processed,
    /// A dead letter of this group, counted once (`dead_letter`).
    DeadLetter,
}

impl RecordInput {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordInput::Uploaded => "uploaded",
            RecordInput::Processed => "processed",
            RecordInput::DeadLetter => "dead_letter",
        }
    }
}

/// How a counting transaction ended: the `result` label of
/// `docflow_analytics_commit_seconds` and `docflow_analytics_batch_records`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitResult {
    /// Committed (`ok`).
    Ok,
    /// Failed (`error`).
    Error,
}

impl CommitResult {
    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            CommitResult::Ok => "ok",
            CommitResult::Error => "error",
        }
    }
}

/// The `result` label of `docflow_analytics_records_total`: `counted` or `duplicate`.
const fn applied_label(applied: Applied) -> &'static str {
    match applied {
        Applied::Counted => "counted",
        Applied::Duplicate => "duplicate",
    }
}

/// The rollup's metrics.
#[derive(Debug, Clone)]
pub struct RollupMetrics {
    records: IntCounterVec,
    batch_records: HistogramVec,
    commit_seconds: HistogramVec,
}

impl RollupMetrics {
    /// Creates and registers them in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let records = IntCounterVec::new(
            Opts::new(
                "docflow_analytics_records_total",
                "Records by input (uploaded, processed, dead_letter) and result (counted, duplicate)",
            ),
            &["input", "result"],
        )?;
        let batch_records = HistogramVec::new(
            HistogramOpts::new(
                "docflow_analytics_batch_records",
                "Records counted per transaction",
            )
            .buckets(vec![
                1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
            ]),
            &["result"],
        )?;
        let commit_seconds = HistogramVec::new(
            HistogramOpts::new(
                "docflow_analytics_commit_seconds",
                "Wall time of one counting transaction",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
            ]),
            &["result"],
        )?;
        registry.register(Box::new(records.clone()))?;
        registry.register(Box::new(batch_records.clone()))?;
        registry.register(Box::new(commit_seconds.clone()))?;
        Ok(RollupMetrics {
            records,
            batch_records,
            commit_seconds,
        })
    }

    /// Counts one record of `input` by what the store did with it.
    pub(crate) fn record(&self, input: RecordInput, applied: Applied) {
        self.records
            .with_label_values(&[input.as_str(), applied_label(applied)])
            .inc();
    }

    /// Observes one counting transaction of `records` records that took `seconds` and
    /// ended with `result`.
    pub(crate) fn observe_commit(&self, result: CommitResult, seconds: f64, records: usize) {
        let label = [result.as_str()];
        self.commit_seconds
            .with_label_values(&label)
            .observe(seconds);
        self.batch_records
            .with_label_values(&label)
            .observe(records as f64);
    }
}

/// One delivery waiting for its batch.
struct Pending {
    delivery: Delivery,
    reply: oneshot::Sender<Result<Applied, BatchError>>,
}

/// Why a record's batch did not commit.
#[derive(Debug, Clone)]
struct BatchError {
    /// The database is unreachable or busy: the record waits for it (never dead-lettered,
    /// or its count would be lost with its offset passed).
    unavailable: bool,
    message: String,
}

impl From<&StoreError> for BatchError {
    fn from(e: &StoreError) -> Self {
        BatchError {
            unavailable: e.is_unavailable(),
            message: e.to_string(),
        }
    }
}

/// The dead-letter class of a record whose counts the database refuses by themselves (a
/// size that overflows the totals, say): counted as dead-lettered instead.
pub const REFUSED: &str = "rollup_refused";

/// First and longest wait between tries while the database is unavailable.
const UNAVAILABLE_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));

/// The rollup's handler.
#[derive(Debug)]
pub struct Rollup {
    codec: EventCodec,
    processed_topic: String,
    batches: mpsc::Sender<Pending>,
    metrics: RollupMetrics,
}

impl Rollup {
    /// The handler and its batcher task (counting into `store`).
    pub fn start(
        store: Analytics,
        codec: EventCodec,
        processed_topic: String,
        batch_max: usize,
        linger: Duration,
        metrics: RollupMetrics,
    ) -> (Self, JoinHandle<()>) {
        let batch_max = batch_max.max(1);
        let (tx, rx) = mpsc::channel(batch_max.saturating_mul(2));
        let batcher = tokio::spawn(batcher(store, rx, batch_max, linger, metrics.clone()));
        (
            Rollup {
                codec,
                processed_topic,
                batches: tx,
                metrics,
            },
            batcher,
        )
    }

    /// Counts `fact` of `record`; returns once its batch has committed. While the database
    /// is unavailable it waits and tries again, however long that takes (its worker slot
    /// stays taken, so at capacity the replica stops taking records); a record the
    /// database refuses by itself is a permanent error (dead-lettered, counted as such).
    async fn count(
        &self,
        record: &Record,
        input: RecordInput,
        fact: Fact,
    ) -> Result<(), HandlerError> {
        let delivery = Delivery {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            fact,
        };
        let stopped = || HandlerError::transient(class::DATABASE, "the batcher has stopped");
        let mut wait = UNAVAILABLE_BACKOFF.0;
        let applied = loop {
            let (reply, answer) = oneshot::channel();
            let pending = Pending {
                delivery: delivery.clone(),
                reply,
            };
            self.batches.send(pending).await.map_err(|_| stopped())?;
            match answer.await.map_err(|_| stopped())? {
                Ok(applied) => break applied,
                Err(e) if e.unavailable => {
                    tracing::warn!(
                        topic = %record.topic,
                        partition = record.partition,
                        offset = record.offset,
                        error = %e.message,
                        retry_in = ?wait,
                        "database unavailable; the record waits for it"
                    );
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(UNAVAILABLE_BACKOFF.1);
                }
                Err(e) => return Err(HandlerError::permanent(REFUSED, e.message)),
            }
        };
        self.metrics.record(input, applied);
        Ok(())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Ok => "OK",
        Outcome::Failed => "FAILED",
        Outcome::DeadLettered => "DEAD_LETTERED",
    }
}

impl Handler for Rollup {
    type Input = Input;

    async fn decode(&self, record: &Record) -> Result<Input, HandlerError> {
        let payload = record
            .payload
            .as_deref()
            .ok_or_else(|| HandlerError::permanent(class::EMPTY, "the record has no value"))?;
        if record.topic == self.processed_topic {
            Ok(Input::Processed(self.codec.decode(payload).await?))
        } else {
            Ok(Input::Uploaded(self.codec.decode(payload).await?))
        }
    }

    async fn handle(&self, record: &Record, input: &Input) -> Result<(), HandlerError> {
        match input {
            Input::Uploaded(e) => {
                let fact = Fact::Uploaded {
                    tenant: e.tenant_id.clone(),
                    content_type: e.content_type.clone(),
                    bytes: e.size_bytes,
                    at_ms: e.uploaded_at,
                };
                self.count(record, RecordInput::Uploaded, fact).await
            }
            Input::Processed(e) => {
                let fact = Fact::Processed {
                    tenant: e.tenant_id.clone(),
                    document_id: e.document_id.clone(),
                    stage: e.stage.clone(),
                    stage_version: e.stage_version,
                    outcome: outcome_name(e.outcome).to_owned(),
                    at_ms: e.finished_at,
                };
                self.count(record, RecordInput::Processed, fact).await
            }
        }
    }

    /// Counts the dead letter (once, like any record) under its tenant when it was readable,
    /// so the totals say what they left out.
    async fn dead_lettered(&self, record: &Record, input: Option<&Input>, error: &HandlerError) {
        let fact = Fact::DeadLettered {
            tenant: input.map(|i| i.tenant().to_owned()),
            error_class: error.class().to_owned(),
            at_ms: record.timestamp_ms.unwrap_or_else(now_ms),
        };
        if let Err(e) = self.count(record, RecordInput::DeadLetter, fact).await {
            tracing::warn!(
                topic = %record.topic,
                partition = record.partition,
                offset = record.offset,
                error = %e,
                "the database refused a dead letter's count; it is in the DLQ but not in the rollup_dead_lettered count"
            );
        }
    }
}

/// The batcher: one transaction per batch of waiting deliveries.
async fn batcher(
    store: Analytics,
    mut rx: mpsc::Receiver<Pending>,
    batch_max: usize,
    linger: Duration,
    metrics: RollupMetrics,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + linger;
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    if linger.is_zero() {
                        break;
                    }
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(p)) => batch.push(p),
                        Ok(None) | Err(_) => break,
                    }
                }
            }
        }
        commit(&store, batch, &metrics).await;
    }
}

/// Counts `batch`; on a failure other than unavailability, each record alone.
async fn commit(store: &Analytics, batch: Vec<Pending>, metrics: &RollupMetrics) {
    let (deliveries, replies): (Vec<Delivery>, Vec<_>) =
        batch.into_iter().map(|p| (p.delivery, p.reply)).unzip();
    let started = Instant::now();
    let result = store.apply(&deliveries).await;
    let outcome = if result.is_ok() {
        CommitResult::Ok
    } else {
        CommitResult::Error
    };
    metrics.observe_commit(outcome, started.elapsed().as_secs_f64(), deliveries.len());
    match result {
        Ok(applied) => {
            for (reply, a) in replies.into_iter().zip(applied) {
                let _ = reply.send(Ok(a));
            }
        }
        Err(e) if e.is_unavailable() || deliveries.len() == 1 => {
            tracing::warn!(records = deliveries.len(), error = %e, "counting transaction failed");
            let err = BatchError::from(&e);
            for reply in replies {
                let _ = reply.send(Err(err.clone()));
            }
        }
        Err(e) => {
            tracing::warn!(records = deliveries.len(), error = %e, "counting transaction failed; counting its records one by one");
            for (delivery, reply) in deliveries.into_iter().zip(replies) {
                let one = store.apply(std::slice::from_ref(&delivery)).await;
                let _ = reply.send(match one {
                    Ok(mut a) => Ok(a.pop().unwrap_or(Applied::Duplicate)),
                    Err(e) => Err(BatchError::from(&e)),
                });
            }
        }
    }
}

/// The runtime's position store over the rollup's database.
#[derive(Debug, Clone)]
pub struct StorePositions(pub Analytics);

fn boxed(e: StoreError) -> PositionError {
    Box::new(e)
}

impl PositionStore for StorePositions {
    fn load<'a>(
        &'a self,
        group: &'a str,
        partitions: &'a [TopicPartition],
    ) -> PositionFuture<'a, Vec<(TopicPartition, i64)>> {
        Box::pin(async move { self.0.positions(group, partitions).await.map_err(boxed) })
    }

    fn save<'a>(
        &'a self,
        group: &'a str,
        positions: &'a [(TopicPartition, i64)],
    ) -> PositionFuture<'a, ()> {
        Box::pin(async move { self.0.save_positions(group, positions).await.map_err(boxed) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_series_keep_their_names_and_label_values() {
        let registry = Registry::new();
        let m = RollupMetrics::new(&registry).unwrap();
        let inputs = [
            (RecordInput::Uploaded, "uploaded"),
            (RecordInput::Processed, "processed"),
            (RecordInput::DeadLetter, "dead_letter"),
        ];
        for (input, label) in inputs {
            assert_eq!(input.as_str(), label);
            m.record(input, Applied::Counted);
            m.record(input, Applied::Duplicate);
        }
        let results = [(CommitResult::Ok, "ok"), (CommitResult::Error, "error")];
        for (r, label) in results {
            assert_eq!(r.as_str(), label);
            m.observe_commit(r, 0.01, 3);
        }
        let t = docflow_runtime::metrics::text(&registry).unwrap();
        let mut expected: Vec<String> = Vec::new();
        for (_, input) in inputs {
            for result in ["counted", "duplicate"] {
                expected.push(format!(
                    "docflow_analytics_records_total{{input=\"{input}\",result=\"{result}\"}} 1"
                ));
            }
        }
        for (_, result) in results {
            expected.push(format!(
                "docflow_analytics_commit_seconds_count{{result=\"{result}\"}} 1"
            ));
            expected.push(format!(
                "docflow_analytics_batch_records_sum{{result=\"{result}\"}} 3"
            ));
        }
        for line in expected {
            assert!(t.lines().any(|l| l == line), "{line}\n{t}");
        }
    }
}
