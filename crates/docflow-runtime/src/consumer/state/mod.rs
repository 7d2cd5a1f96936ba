//! What the poll thread owns, and the client callbacks that reach it: statistics (high
//! watermarks) and rebalances (assign; revoke: drop queued records, await running ones,
//! commit). librdkafka runs the callbacks on the thread that polls, so all of this runs on
//! the poll thread.
//!
//! Split by concern: this file holds the state itself, its context, and the bookkeeping of
//! dispatch, completion and pausing; `rebalance` the client callbacks (statistics,
//! rebalances) with what assigning and revoking partitions does, `--assign-range` included;
//! `watermarks` where the done watermarks go (the client's offset store, the position
//! store).

mod rebalance;
mod watermarks;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

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
    /// Watermarks stored in the client since its last commit was started.
    pub(super) uncommitted: bool,
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
    /// The commit callback's side: outside the state's lock, since librdkafka may call it
    /// from inside a commit made with that lock held (a revoke's synchronous commit).
    commits: CommitResults,
}

/// What the commit callback reports to the poll loop.
pub(super) struct CommitResults {
    metrics: crate::metrics::ConsumerMetrics,
    /// A commit failed: the poll loop commits again (its offsets are still stored).
    pub(super) failed: AtomicBool,
}

impl<H> Ctx<H> {
    pub(super) fn new(state: State<H>, group: String) -> Self {
        let metrics = state.shared.metrics.clone();
        Ctx {
            state: Mutex::new(state),
            group,
            commits: CommitResults {
                metrics,
                failed: AtomicBool::new(false),
            },
        }
    }

    /// The commit callback's reports.
    pub(super) fn commits(&self) -> &CommitResults {
        &self.commits
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State<H>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
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
            uncommitted: false,
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
}
