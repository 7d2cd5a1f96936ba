//! THE consumer runtime: one poll loop per replica feeding a pooled set of workers.
//!
//! Guarantees (each has a test against the real broker, most as real processes):
//! * **At least once.** An offset is stored only when every record below it is done: handled,
//!   or dead-lettered with the DLQ write acknowledged. Only stored offsets are committed.
//! * **Prompt commits.** The poll loop commits as soon as a watermark moves, at most once per
//!   `--commit-interval` (100 ms): Kafka's lag, which KEDA scales on, counts records done
//!   but not committed, and librdkafka's 1 s auto-commit showed ~rate × 0.5 s of them as
//!   lag at rest.
//! * **No stalls on long work.** The poll loop runs on its own thread and never waits for a
//!   handler. Each assigned partition gets its own client queue; at `workers + buffer` records
//!   in flight the loop stops reading them (records wait in the client's fetch buffer, nothing
//!   is discarded) while it keeps polling the consumer, so `max.poll.interval.ms` is never
//!   exceeded by slow handlers. When no record has finished for [`PAUSE_AFTER`] at capacity
//!   (long jobs), it also pauses the assignment so the client stops fetching; it resumes as
//!   soon as a slot frees. (Pausing on every full moment instead would make the client drop
//!   and refetch its buffer each time: on the embedded broker that cut a 3 ms handler from
//!   ~900 to ~15 records/s.)
//! * **Rebalances.** On revoke, queued records of the revoked partitions are dropped, their
//!   running records are awaited (bounded by `revoke_timeout`), the done watermark is
//!   committed synchronously, and nothing is ever stored for a partition no longer owned
//!   (completions carry the assignment epoch and stale ones are ignored).
//! * **Poison records** go to `<topic>.dlq.<group>` with provenance headers; transient errors
//!   retry with capped exponential backoff and jitter first. If the DLQ write fails the
//!   partition stops advancing rather than losing the record.
//! * **Shutdown.** Stop intake (pause), drain in-flight work within the grace period, commit,
//!   leave the group, flush the producer.
//!
//! Layout, by thread. The poll thread: `poll` (its loop, in named phases) and `state` (what
//! it owns, with the client's rebalance and statistics callbacks, which run on it), using
//! `keys` (per-key ordering queues), `tracker` (per-partition offsets) and `gauges` (metric
//! bookkeeping). The tokio runtime: `worker` (one task per record: decode, handle, retry)
//! and `dead_letter` (the DLQ write).

mod dead_letter;
mod gauges;
mod keys;
mod poll;
mod state;
pub(crate) mod tracker;
mod worker;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use docflow_config::{ConsumerArgs, KafkaArgs};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::RuntimeError;
use crate::admin::{TopicSpec, ensure_topics};
use crate::dlq;
use crate::handler::{Handler, Record};
use crate::ledger::DeliveryLedger;
use crate::metrics::{ConsumerMetrics, Health};
use crate::positions::PositionStore;
use crate::producer::idempotent_producer;
use crate::retry::RetryPolicy;

use poll::PollLoop;
use state::{Ctx, State};

/// What a consumer group consumes.
#[derive(Clone)]
pub struct ConsumerSpec {
    /// Consumer group id (one per pipeline stage).
    pub group_id: String,
    /// Topics to subscribe to.
    pub topics: Vec<String>,
    /// Client id reported to the brokers.
    pub client_id: String,
    /// The process's producer, shared for dead letters (a stage passes the one it announces
    /// results with, so a process runs one producer); `None`: the runtime builds its own.
    pub producer: Option<FutureProducer>,
    /// Where deliveries are counted, so a record that keeps taking the process down is
    /// dead-lettered (see [`crate::ledger`]); `None`: no crash counting.
    pub ledger: Option<Arc<dyn DeliveryLedger>>,
    /// Where positions are kept besides Kafka (see [`crate::positions`]): assigned
    /// partitions start where it says; `None`: at Kafka's committed offsets.
    pub positions: Option<Arc<dyn PositionStore>>,
}

impl ConsumerSpec {
    /// Group `group_id` on `topics`, client id `docflow-<group>`, its own dead-letter producer.
    pub fn new(group_id: impl Into<String>, topics: Vec<String>) -> Self {
        let group_id = group_id.into();
        ConsumerSpec {
            client_id: format!("docflow-{group_id}"),
            group_id,
            topics,
            producer: None,
            ledger: None,
            positions: None,
        }
    }
}

impl std::fmt::Debug for ConsumerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerSpec")
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("client_id", &self.client_id)
            .field("shared_producer", &self.producer.is_some())
            .field("ledger", &self.ledger.is_some())
            .field("positions", &self.positions.is_some())
            .finish()
    }
}

type Tp = (String, i32);

/// At capacity with no record finishing for this long, the assignment is paused.
pub const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// Extra time after the shutdown grace for committing and leaving the group.
const LEAVE_GROUP_TIMEOUT: Duration = Duration::from_secs(15);

/// Time handlers interrupted at shutdown get to release their delivery claims.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Job {
    record: Record,
    epoch: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Handled or dead-lettered: the offset may be passed.
    Done,
    /// Given up on (shutdown): the offset must not be passed.
    Abandoned,
}

#[derive(Debug)]
struct Completion {
    tp: Tp,
    offset: i64,
    epoch: u64,
    key: Option<Vec<u8>>,
    outcome: Outcome,
}

/// What workers share.
struct Shared<H> {
    handler: Arc<H>,
    exec: Arc<Semaphore>,
    /// The execution slots: a suspect takes them all.
    workers: u32,
    producer: FutureProducer,
    group: String,
    retry: RetryPolicy,
    metrics: ConsumerMetrics,
    cancel: CancellationToken,
    /// Every record's task, so that shutdown waits for the claims of interrupted handlers
    /// to be released before the process exits.
    tasks: tokio_util::task::TaskTracker,
    done_tx: Sender<Completion>,
    runtime: tokio::runtime::Handle,
    /// Crash counting, with the deliveries after which a record is dead-lettered unrun.
    ledger: Option<(Arc<dyn DeliveryLedger>, u32)>,
    /// Positions kept besides Kafka.
    positions: Option<Arc<dyn PositionStore>>,
}

/// `--assign-range`: assigns exactly the ranges' partitions, each at its start or at the
/// group's committed offset where that is further on (a resumed replay), without joining
/// the group, and tells the state where each range ends.
///
/// Each range's partition queue is split off before the assignment and returned: records
/// fetched before the poll loop split it would otherwise reach the consumer's own queue,
/// which `--max-rate` cannot hold back (a side replay's first records all at once).
fn assign_ranges<H: Handler>(
    consumer: &Arc<BaseConsumer<Ctx<H>>>,
    ranges: &[docflow_config::AssignRange],
) -> Result<poll::SplitQueues<H>, RuntimeError> {
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let mut asked = TopicPartitionList::new();
    for r in ranges {
        asked.add_partition(&r.topic, r.partition);
    }
    let committed = consumer
        .committed_offsets(asked, Duration::from_secs(30))
        .map_err(RuntimeError::kafka(
            "reading the replay group's committed offsets",
        ))?;
    let mut tpl = TopicPartitionList::new();
    let mut placed = Vec::new();
    for r in ranges {
        let done_before = committed
            .find_partition(&r.topic, r.partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
        let start = done_before.map_or(r.start, |c| c.clamp(r.start, r.end));
        tpl.add_partition_offset(&r.topic, r.partition, Offset::Offset(start))
            .map_err(RuntimeError::kafka("building the assignment"))?;
        tracing::info!(topic = %r.topic, partition = r.partition, start, end = r.end, resumed = done_before.is_some(), "replaying a range");
        placed.push(((r.topic.clone(), r.partition), start, r.end));
    }
    let split = ranges
        .iter()
        .filter_map(|r| {
            let q = consumer.split_partition_queue(&r.topic, r.partition)?;
            Some(((r.topic.clone(), r.partition), q))
        })
        .collect();
    consumer
        .assign(&tpl)
        .map_err(RuntimeError::kafka("assigning the ranges"))?;
    consumer.context().lock().assign_ranges(consumer, &placed);
    Ok(split)
}

/// A service replica: [`run`] plus its admin endpoint (`/metrics` with the consumer metrics
/// and whatever else the service registered in `registry`, `/healthz`, `/readyz`) on
/// `args.metrics_listen`, stopped once the consumer has drained.
pub async fn run_service<H: Handler>(
    kafka: &KafkaArgs,
    args: &ConsumerArgs,
    spec: ConsumerSpec,
    handler: Arc<H>,
    registry: prometheus::Registry,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RuntimeError> {
    let metrics = ConsumerMetrics::new(&registry)?;
    // Spans the OTLP export had to drop (0 without export); a registry shared by several
    // replicas in one process has it once.
    let _ = registry.register(Box::new(docflow_telemetry::SPANS_DROPPED.clone()));
    let health = Arc::new(Health::default());
    let listener = crate::metrics::bind_admin(args.metrics_listen).await?;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, group = %spec.group_id, "admin endpoint (/metrics, /healthz, /readyz)");
    }
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin = tokio::spawn(crate::metrics::serve_admin(
        listener,
        registry,
        health.clone(),
        async move {
            let _ = admin_stopped.await;
        },
    ));
    let result = run(kafka, args, spec, handler, metrics, health, shutdown).await;
    let _ = stop_admin.send(());
    let _ = admin.await;
    // The last spans, before the process exits.
    tokio::task::spawn_blocking(docflow_telemetry::flush)
        .await
        .ok();
    result
}

/// Runs a consumer group replica until `shutdown` completes, then drains and commits.
///
/// `handler` sees every record at least once. Metrics go to `metrics`; liveness and
/// readiness to `health` (serve both with [`crate::metrics::serve_admin`]).
pub async fn run<H: Handler>(
    kafka: &KafkaArgs,
    args: &ConsumerArgs,
    spec: ConsumerSpec,
    handler: Arc<H>,
    metrics: ConsumerMetrics,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), RuntimeError> {
    let dlq_topics: Vec<TopicSpec> = spec
        .topics
        .iter()
        .map(|t| TopicSpec::new(dlq::topic_for(t, &spec.group_id), 1))
        .collect();
    if let Err(e) = ensure_topics(kafka, &dlq_topics, Duration::from_secs(30)).await {
        tracing::warn!(error = %e, "could not create dead-letter topics; they must exist");
    }
    if !args.status_topic.is_empty() {
        // Reports are small and only the newest per replica matters: an hour is plenty.
        let mut status = TopicSpec::new(&args.status_topic, 1);
        status.config = vec![("retention.ms".into(), "3600000".into())];
        if let Err(e) = ensure_topics(kafka, &[status], Duration::from_secs(30)).await {
            tracing::warn!(error = %e, topic = %args.status_topic, "could not create the status topic; replica reports need it");
        }
    }
    let producer = match spec.producer.clone() {
        Some(p) => p,
        None => idempotent_producer(kafka, &format!("{}-dlq", spec.client_id))?,
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let workers = args.workers.max(1);
    let shared = Arc::new(Shared {
        handler,
        exec: Arc::new(Semaphore::new(workers)),
        workers: u32::try_from(workers).unwrap_or(u32::MAX),
        producer: producer.clone(),
        group: spec.group_id.clone(),
        retry: RetryPolicy {
            max_attempts: args.max_attempts.max(1),
            base: args.retry_backoff,
            max: args.retry_backoff_max,
        },
        metrics,
        cancel: CancellationToken::new(),
        tasks: tokio_util::task::TaskTracker::new(),
        done_tx,
        runtime: tokio::runtime::Handle::current(),
        ledger: spec
            .ledger
            .clone()
            .filter(|_| args.max_crash_deliveries > 0)
            .map(|l| (l, args.max_crash_deliveries)),
        positions: spec.positions.clone(),
    });
    // How the life before this one died, as the supervisor saw it: recorded before any
    // claim, so the records it held are judged by it (see `crate::ledger`).
    if let Some((life, cause)) = crate::supervise::previous_death() {
        tracing::warn!(previous_life = %life, %cause, life = crate::supervise::life(), "the replica's previous life died");
        if let Some((ledger, _)) = &shared.ledger {
            for attempt in 1..=5 {
                match ledger.record_death(&life, &cause).await {
                    Ok(()) => break,
                    Err(e) if attempt == 5 => {
                        tracing::warn!(error = %e, "could not record the previous life's death; its deaths count as unseen");
                    }
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        }
    }

    let ctx = Ctx::new(
        State::new(
            shared.clone(),
            done_rx,
            workers + args.buffer,
            args.per_key_ordering,
            args.revoke_timeout,
        ),
        spec.group_id.clone(),
    );
    let mut cfg = kafka.client_config(&spec.client_id);
    let session_ms = args.session_timeout.as_millis().max(1);
    cfg.set("group.id", &spec.group_id)
        .set("enable.auto.offset.store", "false")
        // The poll loop commits (`--commit-interval`), on revoke and on leaving.
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", session_ms.to_string())
        .set("heartbeat.interval.ms", (session_ms / 3).max(1).to_string())
        .set(
            "max.poll.interval.ms",
            args.max_poll_interval.as_millis().to_string(),
        )
        .set("statistics.interval.ms", "1000")
        // librdkafka's default (500 ms) made the embedded broker hand new records over
        // ~140 ms late at p50 (bench/results/thumbnails.md); 100 ms brings delivery to ~5 ms
        // for an idle fetch request every 100 ms. `-X fetch.wait.max.ms=...` overrides it.
        .set("fetch.wait.max.ms", "100");
    if let Some(id) = &args.group_instance_id {
        cfg.set("group.instance.id", id);
    }
    for (k, v) in &kafka.options {
        cfg.set(k, v);
    }
    let mut consumer: BaseConsumer<Ctx<H>> = cfg
        .create_with_context(ctx)
        .map_err(RuntimeError::kafka("creating consumer"))?;
    // Rebalances, errors and records of partitions not split off yet wake the poll loop too.
    let wake = Arc::new(poll::Wake::default());
    {
        let wake = wake.clone();
        consumer.set_nonempty_callback(move || wake.ring());
    }
    let consumer = Arc::new(consumer);
    let mut split = Vec::new();
    if args.assign_ranges.is_empty() {
        let topics: Vec<&str> = spec.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(RuntimeError::kafka("subscribing"))?;
    } else {
        let c = consumer.clone();
        let ranges = args.assign_ranges.clone();
        split = tokio::task::spawn_blocking(move || assign_ranges(&c, &ranges))
            .await
            .map_err(|e| RuntimeError::PollThread(e.to_string()))??;
    }
    tracing::info!(group = %spec.group_id, topics = ?spec.topics, workers, buffer = args.buffer, "consumer started");

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let thread_stop = stop.clone();
    let thread_health = health.clone();
    let grace = args.shutdown_grace;
    let max_rate = args.max_rate;
    let commit_interval = args.commit_interval;
    let reporter = if args.status_topic.is_empty() {
        None
    } else {
        Some(crate::status::Reporter::new(
            kafka,
            args.status_topic.clone(),
            args.status_interval.max(Duration::from_millis(100)),
            &spec.group_id,
            &spec.client_id,
            shared.metrics.status_reports.clone(),
        )?)
    };
    std::thread::Builder::new()
        .name(format!("poll-{}", spec.group_id))
        .spawn(move || {
            let r = PollLoop::new(
                &consumer,
                &thread_stop,
                &thread_health,
                grace,
                max_rate,
                reporter,
                wake,
            )
            .commit_every(commit_interval)
            .with_queues(split)
            .run();
            // Leaving the group (close) runs the final revoke callbacks.
            drop(consumer);
            let _ = tx.send(r);
        })
        .map_err(RuntimeError::io("spawning poll thread"))?;
    health.set_ready(true);

    let result = tokio::select! {
        () = shutdown => {
            tracing::info!(group = %spec.group_id, "shutdown: draining");
            stop.store(true, Ordering::SeqCst);
            // Draining is bounded by the grace period; leaving the group needs the broker, so
            // it gets a bounded extra wait: a process must exit even when the broker is gone.
            match tokio::time::timeout(grace + LEAVE_GROUP_TIMEOUT, &mut rx).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::error!(group = %spec.group_id, "leaving the group timed out; exiting without it");
                    Ok(Ok(()))
                }
            }
        }
        r = &mut rx => r,
    };
    health.set_ready(false);
    shared.cancel.cancel();
    // Handlers still running past the grace period stop now; each releases its delivery
    // claim (an interruption, not a death) before the process exits.
    shared.tasks.close();
    if tokio::time::timeout(RELEASE_TIMEOUT, shared.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(group = %spec.group_id, "interrupted records did not all release their claims; they count as deliveries");
    }
    let result = result.map_err(|_| RuntimeError::PollThread("poll thread panicked".into()))?;
    let flushed = tokio::task::spawn_blocking(move || {
        rdkafka::producer::Producer::flush(&producer, Duration::from_secs(10))
    })
    .await;
    if let Ok(Err(e)) = flushed {
        tracing::warn!(error = %e, "flushing the dead-letter producer failed");
    }
    tracing::info!(group = %spec.group_id, "consumer stopped");
    result
}
