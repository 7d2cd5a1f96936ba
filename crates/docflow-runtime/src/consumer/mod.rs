//! THE consumer runtime: one poll loop per replica feeding a pooled set of workers.
//!
//! Guarantees (each has a test against the real broker, most as real processes):
//! * **At least once.** An offset is stored only when every record below it is done: handled,
//!   or dead-lettered with the DLQ write acknowledged. Auto-commit commits only stored offsets.
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

pub(crate) mod tracker;

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use docflow_config::{ConsumerArgs, KafkaArgs};
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::{ClientContext, Message};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::RuntimeError;
use crate::admin::{TopicSpec, ensure_topics};
use crate::dlq;
use crate::handler::{Handler, HandlerError, Record};
use crate::metrics::{ConsumerMetrics, Health, now_ms, outcome};
use crate::producer::idempotent_producer;
use crate::retry::RetryPolicy;
use crate::trace::{TRACEPARENT, TraceContext};

use tracker::PartitionTracker;

/// What a consumer group consumes.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// Consumer group id (one per pipeline stage).
    pub group_id: String,
    /// Topics to subscribe to.
    pub topics: Vec<String>,
    /// Client id reported to the brokers.
    pub client_id: String,
}

type Tp = (String, i32);

/// Longest the poll loop waits for something to do in one pass.
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// At capacity with no record finishing for this long, the assignment is paused.
pub const PAUSE_AFTER: Duration = Duration::from_secs(1);

/// Extra time after the shutdown grace for committing and leaving the group.
const LEAVE_GROUP_TIMEOUT: Duration = Duration::from_secs(15);

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
    producer: FutureProducer,
    group: String,
    retry: RetryPolicy,
    metrics: ConsumerMetrics,
    cancel: CancellationToken,
    done_tx: Sender<Completion>,
    runtime: tokio::runtime::Handle,
}

/// What the poll thread owns (behind a mutex only because librdkafka calls the rebalance
/// and stats callbacks through the context; all of it runs on the poll thread).
struct State<H> {
    shared: Arc<Shared<H>>,
    done_rx: Receiver<Completion>,
    trackers: HashMap<Tp, PartitionTracker>,
    next_epoch: u64,
    in_flight: usize,
    capacity: usize,
    paused: bool,
    per_key: bool,
    key_queues: HashMap<Vec<u8>, VecDeque<Job>>,
    revoke_timeout: Duration,
    last_completion: Instant,
}

struct Ctx<H> {
    state: Mutex<State<H>>,
    group: String,
}

impl<H> Ctx<H> {
    fn lock(&self) -> MutexGuard<'_, State<H>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<H: Handler> ClientContext for Ctx<H> {
    fn stats(&self, statistics: Statistics) {
        let mut st = self.lock();
        for (topic, t) in &statistics.topics {
            for (partition, p) in &t.partitions {
                if let Some(tr) = st.trackers.get_mut(&(topic.clone(), *partition))
                    && p.hi_offset >= 0
                {
                    tr.high_watermark = Some(p.hi_offset);
                }
            }
        }
    }
}

impl<H: Handler> ConsumerContext for Ctx<H> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let tps = tps_of(tpl);
            let lost = consumer.assignment_lost();
            tracing::info!(group = %self.group, partitions = ?tps, lost, "partitions revoked");
            self.lock().revoke(consumer, &tps, lost);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let tps = tps_of(tpl);
                tracing::info!(group = %self.group, partitions = ?tps, "partitions assigned");
                self.lock().assign(consumer, &tps);
            }
            Rebalance::Error(e) => {
                tracing::error!(group = %self.group, error = %e, "rebalance error")
            }
            Rebalance::Revoke(_) => {}
        }
    }
}

fn tps_of(tpl: &TopicPartitionList) -> Vec<Tp> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

fn tpl_of<'a>(tps: impl IntoIterator<Item = &'a Tp>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in tps {
        tpl.add_partition(t, *p);
    }
    tpl
}

impl<H: Handler> State<H> {
    fn spawn(&self, job: Job) {
        self.shared.runtime.spawn(work(self.shared.clone(), job));
    }

    fn dispatch(&mut self, record: Record) {
        let tp = (record.topic.clone(), record.partition);
        let Some(tracker) = self.trackers.get_mut(&tp) else {
            // A record of a partition we no longer own: it will be redelivered to the owner.
            tracing::debug!(topic = %tp.0, partition = tp.1, offset = record.offset, "record for an unowned partition skipped");
            return;
        };
        tracker.dispatched(record.offset, record.timestamp_ms);
        let job = Job {
            epoch: tracker.epoch,
            record,
        };
        self.in_flight += 1;
        if self.per_key
            && let Some(key) = job.record.key.clone()
        {
            if let Some(queue) = self.key_queues.get_mut(&key) {
                queue.push_back(job);
                return;
            }
            self.key_queues.insert(key, VecDeque::new());
        }
        self.spawn(job);
    }

    fn complete(&mut self, c: Completion) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.last_completion = Instant::now();
        if self.per_key
            && let Some(key) = &c.key
        {
            match self.key_queues.get_mut(key).and_then(VecDeque::pop_front) {
                Some(next) => self.spawn(next),
                None => {
                    self.key_queues.remove(key);
                }
            }
        }
        if let Some(t) = self.trackers.get_mut(&c.tp)
            && t.epoch == c.epoch
        {
            match c.outcome {
                Outcome::Done => {
                    t.completed(c.offset);
                }
                Outcome::Abandoned => t.abandon(c.offset),
            }
        }
    }

    fn wait_for_completion(&mut self, timeout: Duration) {
        if let Ok(c) = self.done_rx.recv_timeout(timeout) {
            self.complete(c);
        }
    }

    fn drain(&mut self) {
        while let Ok(c) = self.done_rx.try_recv() {
            self.complete(c);
        }
    }

    /// Hands every advanced watermark to the client's offset store (auto-commit sends it).
    fn store(&mut self, consumer: &BaseConsumer<Ctx<H>>) {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), t) in &mut self.trackers {
            if let Some(w) = t.take_store() {
                let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(w));
            }
        }
        if tpl.count() > 0
            && let Err(e) = consumer.store_offsets(&tpl)
        {
            tracing::warn!(error = %e, "storing offsets failed");
        }
    }

    fn set_paused(&mut self, consumer: &BaseConsumer<Ctx<H>>, paused: bool) {
        let Ok(assignment) = consumer.assignment() else {
            return;
        };
        let res = if paused {
            consumer.pause(&assignment)
        } else {
            consumer.resume(&assignment)
        };
        match res {
            Ok(()) => {
                self.paused = paused;
                let n = if paused { assignment.count() } else { 0 };
                self.metric_paused(n);
            }
            Err(e) => tracing::warn!(error = %e, paused, "pause/resume failed"),
        }
    }

    fn metric_paused(&self, n: usize) {
        self.shared
            .metrics
            .paused_partitions
            .with_label_values(&[&self.shared.group])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    fn has_room(&self) -> bool {
        self.in_flight < self.capacity
    }

    fn update_pause(&mut self, consumer: &BaseConsumer<Ctx<H>>) {
        let want = if self.paused {
            !self.has_room()
        } else {
            !self.has_room() && self.last_completion.elapsed() >= PAUSE_AFTER
        };
        if want != self.paused {
            tracing::debug!(
                in_flight = self.in_flight,
                capacity = self.capacity,
                pause = want,
                "capacity"
            );
            self.set_paused(consumer, want);
        }
    }

    fn running_in(&self, tps: &HashSet<&Tp>) -> usize {
        self.trackers
            .iter()
            .filter(|(tp, _)| tps.contains(tp))
            .map(|(_, t)| t.in_flight())
            .sum()
    }

    fn revoke(&mut self, consumer: &BaseConsumer<Ctx<H>>, tps: &[Tp], lost: bool) {
        let kind = if lost { "lost" } else { "revoke" };
        self.shared
            .metrics
            .rebalances
            .with_label_values(&[&self.shared.group, kind])
            .inc();
        let revoked: HashSet<&Tp> = tps.iter().collect();
        // Queued records of revoked partitions never start here.
        let mut dropped = 0;
        for queue in self.key_queues.values_mut() {
            queue.retain(|job| {
                let tp = (job.record.topic.clone(), job.record.partition);
                if revoked.contains(&tp) {
                    if let Some(t) = self.trackers.get_mut(&tp) {
                        t.abandon(job.record.offset);
                    }
                    dropped += 1;
                    false
                } else {
                    true
                }
            });
        }
        self.in_flight = self.in_flight.saturating_sub(dropped);
        if !lost {
            // Wait (bounded) for the running records of the revoked partitions.
            let deadline = Instant::now() + self.revoke_timeout;
            self.drain();
            while self.running_in(&revoked) > 0 {
                let now = Instant::now();
                if now >= deadline {
                    tracing::warn!(
                        running = self.running_in(&revoked),
                        "revoke timeout: running records will be redelivered to the new owner"
                    );
                    break;
                }
                match self
                    .done_rx
                    .recv_timeout((deadline - now).min(Duration::from_millis(50)))
                {
                    Ok(c) => self.complete(c),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            let mut tpl = TopicPartitionList::new();
            for tp in tps {
                if let Some(w) = self.trackers.get(tp).and_then(PartitionTracker::watermark) {
                    let _ = tpl.add_partition_offset(&tp.0, tp.1, Offset::Offset(w));
                }
            }
            if tpl.count() > 0 {
                // Store as well as commit: with auto-commit on, the client commits the stored
                // offsets of revoked partitions once more as it unassigns them, and an older
                // stored offset would move the group's position back (a redelivery).
                if let Err(e) = consumer.store_offsets(&tpl) {
                    tracing::debug!(error = %e, "storing offsets on revoke failed");
                }
                if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
                    tracing::warn!(error = %e, "commit on revoke failed");
                } else {
                    tracing::debug!(offsets = ?tpl, "committed on revoke");
                }
            }
        }
        for tp in tps {
            self.trackers.remove(tp);
            let labels = [self.shared.group.as_str(), tp.0.as_str(), &tp.1.to_string()];
            let _ = self.shared.metrics.lag_records.remove_label_values(&labels);
            let _ = self.shared.metrics.lag_seconds.remove_label_values(&labels);
        }
    }

    fn assign(&mut self, consumer: &BaseConsumer<Ctx<H>>, tps: &[Tp]) {
        self.shared
            .metrics
            .rebalances
            .with_label_values(&[&self.shared.group, "assign"])
            .inc();
        for tp in tps {
            self.next_epoch += 1;
            self.trackers
                .insert(tp.clone(), PartitionTracker::new(self.next_epoch));
        }
        if self.paused
            && let Err(e) = consumer.pause(&tpl_of(tps))
        {
            tracing::warn!(error = %e, "pausing newly assigned partitions failed");
        }
    }

    fn update_metrics(&self) {
        let m = &self.shared.metrics;
        let g = self.shared.group.as_str();
        m.in_flight
            .with_label_values(&[g])
            .set(i64::try_from(self.in_flight).unwrap_or(i64::MAX));
        m.assigned_partitions
            .with_label_values(&[g])
            .set(i64::try_from(self.trackers.len()).unwrap_or(i64::MAX));
        let now = now_ms();
        for ((topic, partition), t) in &self.trackers {
            let p = partition.to_string();
            let labels = [g, topic.as_str(), p.as_str()];
            if let Some(lag) = t.lag_records() {
                m.lag_records.with_label_values(&labels).set(lag);
            }
            m.lag_seconds
                .with_label_values(&labels)
                .set(t.lag_seconds(now));
        }
    }
}

fn to_record(m: &BorrowedMessage<'_>) -> Record {
    let headers: Vec<(String, Option<Vec<u8>>)> = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        })
        .unwrap_or_default();
    let parent = headers
        .iter()
        .find(|(k, _)| k == TRACEPARENT)
        .and_then(|(_, v)| v.as_deref());
    let trace = TraceContext::from_header(parent);
    Record {
        topic: m.topic().to_owned(),
        partition: m.partition(),
        offset: m.offset(),
        key: m.key().map(<[u8]>::to_vec),
        payload: m.payload().map(<[u8]>::to_vec),
        headers,
        timestamp_ms: m.timestamp().to_millis(),
        attempt: 1,
        trace,
    }
}

async fn work<H: Handler>(s: Arc<Shared<H>>, job: Job) {
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

async fn process<H: Handler>(s: &Shared<H>, record: &mut Record) -> Outcome {
    let group = s.group.as_str();
    loop {
        let permit = tokio::select! {
            p = s.exec.clone().acquire_owned() => p,
            () = s.cancel.cancelled() => return abandoned(s),
        };
        let Ok(permit) = permit else {
            return abandoned(s);
        };
        let started = Instant::now();
        let result = s.handler.handle(record).await;
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
            Err(e) => return dead_letter(s, record, &e).await,
        }
    }
}

fn abandoned<H>(s: &Shared<H>) -> Outcome {
    s.metrics
        .messages
        .with_label_values(&[&s.group, outcome::ABANDONED])
        .inc();
    Outcome::Abandoned
}

async fn dead_letter<H: Handler>(s: &Shared<H>, record: &Record, e: &HandlerError) -> Outcome {
    let topic = dlq::topic_for(&record.topic, &s.group);
    let headers =
        dlq::dead_letter_headers(record, &s.group, e.class(), e.message(), record.attempt);
    let mut failures = 0u32;
    loop {
        let mut fr: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(&topic).headers(headers.clone());
        if let Some(k) = &record.key {
            fr = fr.key(k.as_slice());
        }
        if let Some(p) = &record.payload {
            fr = fr.payload(p.as_slice());
        }
        match s.producer.send(fr, Duration::from_secs(30)).await {
            Ok(_) => {
                s.metrics
                    .messages
                    .with_label_values(&[&s.group, outcome::DEAD_LETTERED])
                    .inc();
                tracing::warn!(class = e.class(), error = e.message(), dlq = %topic, attempts = record.attempt, "dead-lettered");
                s.handler.dead_lettered(record, e).await;
                return Outcome::Done;
            }
            Err((err, _)) => {
                failures += 1;
                s.metrics
                    .dlq_write_errors
                    .with_label_values(&[&s.group])
                    .inc();
                let delay = s.retry.delay(failures);
                tracing::error!(error = %err, dlq = %topic, ?delay, "dead-letter write failed; the partition waits");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {},
                    () = s.cancel.cancelled() => return abandoned(s),
                }
            }
        }
    }
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
    let producer = idempotent_producer(kafka, &format!("{}-dlq", spec.client_id))?;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let workers = args.workers.max(1);
    let shared = Arc::new(Shared {
        handler,
        exec: Arc::new(Semaphore::new(workers)),
        producer: producer.clone(),
        group: spec.group_id.clone(),
        retry: RetryPolicy {
            max_attempts: args.max_attempts.max(1),
            base: args.retry_backoff,
            max: args.retry_backoff_max,
        },
        metrics,
        cancel: CancellationToken::new(),
        done_tx,
        runtime: tokio::runtime::Handle::current(),
    });
    let ctx = Ctx {
        state: Mutex::new(State {
            shared: shared.clone(),
            done_rx,
            trackers: HashMap::new(),
            next_epoch: 0,
            in_flight: 0,
            capacity: workers + args.buffer,
            paused: false,
            per_key: args.per_key_ordering,
            key_queues: HashMap::new(),
            revoke_timeout: args.revoke_timeout,
            last_completion: Instant::now(),
        }),
        group: spec.group_id.clone(),
    };
    let mut cfg = kafka.client_config(&spec.client_id);
    let session_ms = args.session_timeout.as_millis().max(1);
    cfg.set("group.id", &spec.group_id)
        .set("enable.auto.offset.store", "false")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
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
    let consumer: Arc<BaseConsumer<Ctx<H>>> = Arc::new(
        cfg.create_with_context(ctx)
            .map_err(RuntimeError::kafka("creating consumer"))?,
    );
    let topics: Vec<&str> = spec.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(RuntimeError::kafka("subscribing"))?;
    tracing::info!(group = %spec.group_id, topics = ?spec.topics, workers, buffer = args.buffer, "consumer started");

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let thread_stop = stop.clone();
    let thread_health = health.clone();
    let grace = args.shutdown_grace;
    std::thread::Builder::new()
        .name(format!("poll-{}", spec.group_id))
        .spawn(move || {
            let r = poll_loop(&consumer, &thread_stop, &thread_health, grace);
            // Leaving the group (close) runs the final revoke callbacks.
            drop(consumer);
            let _ = tx.send(r);
        })
        .map_err(|e| RuntimeError::Io(format!("spawning poll thread: {e}")))?;
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

fn poll_loop<H: Handler>(
    consumer: &Arc<BaseConsumer<Ctx<H>>>,
    stop: &AtomicBool,
    health: &Health,
    grace: Duration,
) -> Result<(), RuntimeError> {
    let ctx = consumer.context();
    let mut last_metrics = Instant::now();
    // One client queue per owned partition, read only while there is room. Kept here, not in
    // the context: a queue holds the consumer, and the consumer holds the context.
    let mut queues: Vec<(Tp, PartitionQueue<Ctx<H>>)> = Vec::new();
    let mut next_queue = 0usize;
    while !stop.load(Ordering::SeqCst) {
        health.polled();
        let (owned, mut room) = {
            let mut st = ctx.lock();
            st.drain();
            st.store(consumer);
            st.update_pause(consumer);
            if last_metrics.elapsed() >= Duration::from_secs(1) {
                st.update_metrics();
                last_metrics = Instant::now();
            }
            let owned: HashSet<Tp> = st.trackers.keys().cloned().collect();
            (owned, st.capacity.saturating_sub(st.in_flight))
        };
        queues.retain(|(tp, _)| owned.contains(tp));
        for tp in owned {
            if !queues.iter().any(|(q, _)| *q == tp)
                && let Some(q) = consumer.split_partition_queue(&tp.0, tp.1)
            {
                queues.push((tp, q));
            }
        }
        // Round-robin over the partition queues, one record per queue per pass, while there
        // is room: every partition makes progress, none is favoured.
        let mut progressed = true;
        let mut dispatched = false;
        while room > 0 && progressed && !queues.is_empty() {
            progressed = false;
            for i in 0..queues.len() {
                if room == 0 {
                    break;
                }
                let idx = (next_queue + i) % queues.len();
                match queues[idx].1.poll(Duration::ZERO) {
                    Some(Ok(m)) => {
                        let record = to_record(&m);
                        drop(m);
                        ctx.lock().dispatch(record);
                        room -= 1;
                        progressed = true;
                        dispatched = true;
                    }
                    Some(Err(e)) => tracing::warn!(error = %e, "partition queue error"),
                    None => {}
                }
            }
            next_queue = next_queue.wrapping_add(1);
        }
        // The consumer itself: rebalances, stats, errors, and records of partitions whose queue
        // is not split yet. Polling it is what keeps max.poll.interval.ms satisfied. It waits
        // a little only when this pass found nothing to do.
        let wait = if dispatched {
            Duration::ZERO
        } else if room == 0 {
            // Full: wake on the first completion rather than on a timer.
            ctx.lock().wait_for_completion(IDLE_WAIT);
            Duration::ZERO
        } else {
            IDLE_WAIT
        };
        match consumer.poll(wait) {
            None => {}
            Some(Err(e)) => tracing::warn!(error = %e, "consumer error"),
            Some(Ok(m)) => {
                let record = to_record(&m);
                drop(m);
                ctx.lock().dispatch(record);
            }
        }
    }

    // Stop intake, drain within the grace period, commit.
    {
        let mut st = ctx.lock();
        st.set_paused(consumer, true);
    }
    drop(queues);
    let deadline = Instant::now() + grace;
    loop {
        health.polled();
        {
            let mut st = ctx.lock();
            st.drain();
            st.store(consumer);
            let running: usize = st.trackers.values().map(PartitionTracker::in_flight).sum();
            if running == 0 {
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    running,
                    "shutdown grace over; unfinished records will be redelivered"
                );
                break;
            }
        }
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(20)) {
            tracing::debug!(
                offset = m.offset(),
                "record after stop not dispatched; it will be redelivered"
            );
        }
    }
    {
        let mut st = ctx.lock();
        st.update_metrics();
        st.revoke_timeout = Duration::ZERO;
        st.shared.cancel.cancel();
    }
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) => tracing::info!("offsets committed"),
        Err(e) => tracing::debug!(error = %e, "final commit: nothing to commit or not possible"),
    }
    consumer.unsubscribe();
    Ok(())
}
