//! What the poll thread owns, and the client callbacks that reach it: statistics (high
//! watermarks) and rebalances (assign; revoke: drop queued records, await running ones,
//! commit). librdkafka runs the callbacks on the thread that polls, so all of this runs on
//! the poll thread.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::handler::{Handler, Record};

use super::gauges::Gauges;
use super::keys::KeyQueues;
use super::tracker::PartitionTracker;
use super::worker::work;
use super::{Completion, Job, Outcome, PAUSE_AFTER, Shared, Tp};

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
        }
    }

    fn gauges(&self) -> Gauges<'_> {
        Gauges::new(&self.shared.metrics, &self.shared.group)
    }

    fn spawn(&self, job: Job) {
        self.shared.runtime.spawn(work(self.shared.clone(), job));
    }

    /// The partitions owned now.
    pub(super) fn owned(&self) -> HashSet<Tp> {
        self.trackers.keys().cloned().collect()
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
            }
        }
        if tpl.count() > 0
            && let Err(e) = consumer.store_offsets(&tpl)
        {
            tracing::warn!(error = %e, "storing offsets failed");
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
