//! What the poll thread owns, and the client callbacks that reach it: statistics (high
//! watermarks) and rebalances (assign; revoke: drop queued records, await running ones,
//! commit). librdkafka runs the callbacks on the thread that polls, so all of this runs on
//! the poll thread.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, RebalanceProtocol,
};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};

use crate::handler::{Handler, Record};

use super::gauges::Gauges;
use super::keys::KeyQueues;
use super::tracker::PartitionTracker;
use super::worker::work;
use super::{Completion, Job, Outcome, PAUSE_AFTER, Shared, Tp};

/// Tries at loading the positions of newly assigned partitions before the replica stops.
const POSITION_LOAD_ATTEMPTS: u32 = 3;
/// Pause between those tries.
const POSITION_LOAD_BACKOFF: Duration = Duration::from_secs(1);
/// Least time between two background position saves.
const POSITION_SAVE_EVERY: Duration = Duration::from_millis(500);
/// Longest one load or save of positions may take.
const POSITION_LOAD_TIMEOUT: Duration = Duration::from_secs(5);

/// What the poll thread owns (behind a mutex only because librdkafka calls the rebalance
/// and stats callbacks through the context; all of it runs on the poll thread).
pub(super) struct State<H> {
    pub(super) shared: Arc<Shared<H>>,
    done_rx: Receiver<Completion>,
    trackers: HashMap<Tp, PartitionTracker>,
    next_epoch: u64,
    in_flight: usize,
    capacity: usize,
    paused: bool,
    key_queues: KeyQueues,
    /// How long a revoke waits for the revoked partitions' running records.
    pub(super) revoke_timeout: Duration,
    last_completion: Instant,
    /// Watermarks stored in Kafka but not yet saved to the position store.
    unsaved: HashMap<Tp, i64>,
    /// A background position save is running.
    saving: Arc<std::sync::atomic::AtomicBool>,
    /// When the last background position save started.
    last_save: Instant,
    /// Why the replica must stop (the position store could not place a partition).
    pub(super) fatal: Option<String>,
    /// `--assign-range`: per partition, where the range starts here and where it ends
    /// (exclusive); empty for a live member of the group.
    ranges: HashMap<Tp, (i64, i64)>,
    /// Ranged partitions a record at or past the range end was read from: every record of
    /// the range before it was read too (gaps, a retention reset past the end).
    ranges_passed: HashSet<Tp>,
}

/// The consumer's client context.
pub(super) struct Ctx<H> {
    state: Mutex<State<H>>,
    group: String,
}

impl<H> Ctx<H> {
    pub(super) fn new(state: State<H>, group: String) -> Self {
        Ctx {
            state: Mutex::new(state),
            group,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State<H>> {
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
    /// librdkafka's default rebalance (what rdkafka's default does), plus one step: with a
    /// position store, assigned partitions get their starting offsets from it first.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let unassign = |tpl: &TopicPartitionList| {
            if cooperative {
                consumer.incremental_unassign(tpl)
            } else {
                consumer.unassign()
            }
        };
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.pre_rebalance(consumer, &Rebalance::Assign(tpl));
                self.lock().place(consumer, tpl);
                let assigned = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = assigned {
                    tracing::error!(group = %self.group, error = %e, "assigning partitions failed");
                }
                self.post_rebalance(consumer, &Rebalance::Assign(tpl));
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.pre_rebalance(consumer, &Rebalance::Revoke(tpl));
                if let Err(e) = unassign(tpl) {
                    tracing::error!(group = %self.group, error = %e, "unassigning partitions failed");
                }
                self.post_rebalance(consumer, &Rebalance::Revoke(tpl));
            }
            other => {
                let code: RDKafkaErrorCode = other.into();
                if let Err(e) = unassign(tpl) {
                    tracing::error!(group = %self.group, error = %e, "unassigning partitions failed");
                }
                self.post_rebalance(consumer, &Rebalance::Error(KafkaError::Rebalance(code)));
            }
        }
    }

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

/// A stored position beyond its partition's log end: the store does not describe this
/// topic (recreated, truncated, or a database from elsewhere), and starting there would
/// pass records as done that were never seen. `None` when all are within the logs (or the
/// log ends cannot be read: nothing to compare with).
fn past_the_log_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    positions: &HashMap<Tp, i64>,
) -> Option<String> {
    for ((topic, partition), next) in positions {
        match consumer.fetch_watermarks(topic, *partition, Duration::from_secs(5)) {
            Ok((_, end)) if *next > end => {
                return Some(format!(
                    "the stored position {next} of {topic}/{partition} is past the log end {end}: \
                     the position store does not match this topic (recreated? a database from \
                     elsewhere?); starting there would pass unseen records as done"
                ));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(%topic, partition, error = %e, "log end unknown; the stored position is not checked")
            }
        }
    }
    None
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
    pub(super) fn new(
        shared: Arc<Shared<H>>,
        done_rx: Receiver<Completion>,
        capacity: usize,
        per_key: bool,
        revoke_timeout: Duration,
    ) -> Self {
        State {
            shared,
            done_rx,
            trackers: HashMap::new(),
            next_epoch: 0,
            in_flight: 0,
            capacity,
            paused: false,
            key_queues: KeyQueues::new(per_key),
            revoke_timeout,
            last_completion: Instant::now(),
            unsaved: HashMap::new(),
            saving: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            last_save: Instant::now(),
            fatal: None,
            ranges: HashMap::new(),
            ranges_passed: HashSet::new(),
        }
    }

    fn gauges(&self) -> Gauges<'_> {
        Gauges::new(&self.shared.metrics, &self.shared.group)
    }

    fn spawn(&self, job: Job) {
        let task = self
            .shared
            .tasks
            .track_future(work(self.shared.clone(), job));
        self.shared.runtime.spawn(task);
    }

    /// The partitions owned now.
    pub(super) fn owned(&self) -> HashSet<Tp> {
        self.trackers.keys().cloned().collect()
    }

    /// This replica's status for `reporter`'s next report.
    pub(super) fn status(
        &self,
        reporter: &crate::status::Reporter,
        stopped: bool,
    ) -> crate::status::ReplicaStatus {
        let mut assigned: Vec<crate::status::TopicPartition> = self
            .trackers
            .keys()
            .map(|(topic, partition)| crate::status::TopicPartition {
                topic: topic.clone(),
                partition: *partition,
            })
            .collect();
        assigned.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        reporter.report(
            assigned,
            self.paused,
            self.in_flight,
            self.capacity,
            stopped,
        )
    }

    /// Whether the assignment is paused.
    pub(super) fn is_paused(&self) -> bool {
        self.paused
    }

    /// How many more records may be dispatched now.
    pub(super) fn room(&self) -> usize {
        self.capacity.saturating_sub(self.in_flight)
    }

    /// Records dispatched and not finished, over all owned partitions.
    pub(super) fn running(&self) -> usize {
        self.trackers
            .values()
            .map(PartitionTracker::in_flight)
            .sum()
    }

    pub(super) fn dispatch(&mut self, record: Record) {
        if self.fatal.is_some() {
            // Stopping: a partition may be positioned wrongly; the record is redelivered.
            return;
        }
        let tp = (record.topic.clone(), record.partition);
        if let Some((start, end)) = self.ranges.get(&tp) {
            // Outside the replayed range: not this replica's to process.
            if record.offset >= *end {
                self.ranges_passed.insert(tp);
                return;
            }
            if record.offset < *start {
                return;
            }
        }
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
        if let Some(job) = self.key_queues.admit(job) {
            self.spawn(job);
        }
    }

    fn complete(&mut self, c: Completion) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.last_completion = Instant::now();
        if let Some(next) = self.key_queues.next_after(c.key.as_deref()) {
            self.spawn(next);
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

    pub(super) fn wait_for_completion(&mut self, timeout: Duration) {
        if let Ok(c) = self.done_rx.recv_timeout(timeout) {
            self.complete(c);
        }
    }

    pub(super) fn drain(&mut self) {
        while let Ok(c) = self.done_rx.try_recv() {
            self.complete(c);
        }
    }

    /// Hands every advanced watermark to the client's offset store (auto-commit sends it).
    pub(super) fn store(&mut self, consumer: &BaseConsumer<Ctx<H>>) {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), t) in &mut self.trackers {
            if let Some(w) = t.take_store() {
                let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(w));
                if self.shared.positions.is_some() {
                    self.unsaved.insert((topic.clone(), *partition), w);
                }
            }
        }
        if tpl.count() > 0
            && let Err(e) = consumer.store_offsets(&tpl)
        {
            tracing::warn!(error = %e, "storing offsets failed");
        }
        self.save_positions_in_background();
    }

    /// Starts saving the unsaved watermarks unless a save runs or one started less than
    /// [`POSITION_SAVE_EVERY`] ago. A failed save is logged; the partition's next advance,
    /// or its revoke, saves it again (a position that lags only costs re-reading records
    /// whose effects the consumer recognises).
    fn save_positions_in_background(&mut self) {
        use std::sync::atomic::Ordering;
        let Some(store) = self.shared.positions.clone() else {
            return;
        };
        if self.unsaved.is_empty()
            || self.last_save.elapsed() < POSITION_SAVE_EVERY
            || self.saving.swap(true, Ordering::SeqCst)
        {
            return;
        }
        self.last_save = Instant::now();
        let batch: Vec<(Tp, i64)> = self.unsaved.drain().collect();
        let saving = self.saving.clone();
        let group = self.shared.group.clone();
        self.shared.runtime.spawn(async move {
            if let Err(e) = store.save(&group, &batch).await {
                tracing::warn!(%group, error = %e, "saving positions failed; a later save retries");
            }
            saving.store(false, Ordering::SeqCst);
        });
    }

    /// With a position store: sets each assigned partition's starting offset in `tpl` to the
    /// stored position, or the partition's beginning where none is stored. A store that
    /// keeps failing marks the replica fatal (it stops and exits with the error).
    fn place(&mut self, consumer: &BaseConsumer<Ctx<H>>, tpl: &mut TopicPartitionList) {
        let Some(store) = self.shared.positions.clone() else {
            return;
        };
        let tps = tps_of(tpl);
        let group = self.shared.group.clone();
        let mut last_error = String::new();
        for attempt in 0..POSITION_LOAD_ATTEMPTS {
            let loaded = self.shared.runtime.block_on(async {
                if attempt > 0 {
                    tokio::time::sleep(POSITION_LOAD_BACKOFF).await;
                }
                tokio::time::timeout(POSITION_LOAD_TIMEOUT, store.load(&group, &tps)).await
            });
            match loaded {
                Ok(Ok(positions)) => {
                    let known: HashMap<Tp, i64> = positions.into_iter().collect();
                    if let Some(why) = past_the_log_end(consumer, &known) {
                        tracing::error!(%group, error = %why, "refusing to start past the log end");
                        self.fatal = Some(why);
                        return;
                    }
                    for (topic, partition) in &tps {
                        let offset = match known.get(&(topic.clone(), *partition)) {
                            Some(next) => Offset::Offset(*next),
                            None => Offset::Beginning,
                        };
                        if let Err(e) = tpl.set_partition_offset(topic, *partition, offset) {
                            tracing::warn!(%topic, partition, error = %e, "setting a start offset failed");
                        }
                    }
                    tracing::info!(%group, positions = ?known, "partitions start at the stored positions");
                    return;
                }
                Ok(Err(e)) => last_error = e.to_string(),
                Err(_) => last_error = format!("no answer within {POSITION_LOAD_TIMEOUT:?}"),
            }
            tracing::warn!(%group, attempt = attempt + 1, error = %last_error, "loading positions failed");
        }
        tracing::error!(%group, error = %last_error, "cannot place the assigned partitions; stopping");
        self.fatal = Some(last_error);
    }

    /// Saves the final watermarks of `tps` now (bounded): on revoke, before they go.
    fn save_positions_now(&mut self, tps: &[Tp]) {
        let Some(store) = self.shared.positions.clone() else {
            return;
        };
        let final_marks: Vec<(Tp, i64)> = tps
            .iter()
            .filter_map(|tp| {
                self.unsaved.remove(tp);
                Some((tp.clone(), self.trackers.get(tp)?.watermark()?))
            })
            .collect();
        if final_marks.is_empty() {
            return;
        }
        let group = self.shared.group.clone();
        let saved = self.shared.runtime.block_on(async {
            tokio::time::timeout(POSITION_LOAD_TIMEOUT, store.save(&group, &final_marks)).await
        });
        match saved {
            Ok(Ok(())) => {
                tracing::debug!(%group, positions = ?final_marks, "positions saved on revoke")
            }
            Ok(Err(e)) => tracing::warn!(%group, error = %e, "saving positions on revoke failed"),
            Err(_) => tracing::warn!(%group, "saving positions on revoke timed out"),
        }
    }

    pub(super) fn set_paused(&mut self, consumer: &BaseConsumer<Ctx<H>>, paused: bool) {
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
                self.gauges().paused(n);
            }
            Err(e) => tracing::warn!(error = %e, paused, "pause/resume failed"),
        }
    }

    fn has_room(&self) -> bool {
        self.in_flight < self.capacity
    }

    pub(super) fn update_pause(&mut self, consumer: &BaseConsumer<Ctx<H>>) {
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

    pub(super) fn update_metrics(&self) {
        self.gauges().update(self.in_flight, &self.trackers);
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
        self.gauges().rebalanced(kind);
        let revoked: HashSet<&Tp> = tps.iter().collect();
        // Queued records of revoked partitions never start here.
        let dropped = self.key_queues.drop_partitions(&revoked);
        for job in &dropped {
            let tp = (job.record.topic.clone(), job.record.partition);
            if let Some(t) = self.trackers.get_mut(&tp) {
                t.abandon(job.record.offset);
            }
        }
        self.in_flight = self.in_flight.saturating_sub(dropped.len());
        if !lost {
            self.await_running(&revoked);
            self.commit_revoked(consumer, tps);
            self.save_positions_now(tps);
        }
        for tp in tps {
            self.trackers.remove(tp);
            self.gauges().forget_partition(tp);
        }
    }

    /// Waits (bounded by `revoke_timeout`) for the running records of the revoked partitions.
    fn await_running(&mut self, revoked: &HashSet<&Tp>) {
        let deadline = Instant::now() + self.revoke_timeout;
        self.drain();
        while self.running_in(revoked) > 0 {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    running = self.running_in(revoked),
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
    }

    /// Stores and synchronously commits the done watermark of the revoked partitions.
    fn commit_revoked(&self, consumer: &BaseConsumer<Ctx<H>>, tps: &[Tp]) {
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

    /// `--assign-range`: owns exactly `ranges` (partition, first offset here, end), assigned
    /// by the caller without the group.
    pub(super) fn assign_ranges(
        &mut self,
        consumer: &BaseConsumer<Ctx<H>>,
        ranges: &[(Tp, i64, i64)],
    ) {
        let tps: Vec<Tp> = ranges.iter().map(|(tp, _, _)| tp.clone()).collect();
        self.assign(consumer, &tps);
        self.ranges = ranges
            .iter()
            .map(|(tp, start, end)| (tp.clone(), (*start, *end)))
            .collect();
    }

    /// With `--assign-range`: whether every range is done: everything below its end
    /// handled or dead-lettered, or nothing in flight once a record past the end was read
    /// (offsets missing before the end, or a range the log's retention already passed).
    pub(super) fn ranges_done(&self) -> bool {
        !self.ranges.is_empty()
            && self.ranges.iter().all(|(tp, (start, end))| {
                let tracker = self.trackers.get(tp);
                let at = tracker
                    .and_then(PartitionTracker::watermark)
                    .unwrap_or(*start);
                let idle = tracker.is_none_or(|t| t.in_flight() == 0);
                at >= *end || (idle && self.ranges_passed.contains(tp))
            })
    }

    fn assign(&mut self, consumer: &BaseConsumer<Ctx<H>>, tps: &[Tp]) {
        self.gauges().rebalanced("assign");
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
}
