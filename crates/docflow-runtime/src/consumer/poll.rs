//! The poll thread's loop. Each pass runs the same phases in order:
//!
//! 1. [`PollLoop::housekeeping`]: take in completions, store offsets, commit them when due,
//!    pause or resume, refresh the gauges (once a second);
//! 2. [`PollLoop::sync_partition_queues`]: one client queue per owned partition;
//! 3. [`PollLoop::dispatch_from_queues`]: round robin over those queues while there is room;
//! 4. [`PollLoop::poll_consumer`]: the consumer itself (rebalances, statistics, errors), the
//!    only phase that may wait.
//!
//! Once stopped: [`PollLoop::stop_intake`], [`PollLoop::drain_within_grace`],
//! [`PollLoop::commit_and_leave`].

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::Message;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};

use crate::RuntimeError;
use crate::handler::{Handler, Record};
use crate::metrics::Health;

use super::Tp;
use super::state::{Ctx, State};

/// Longest the poll loop waits for something to do in one pass.
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// How often the gauges are refreshed.
const METRICS_EVERY: Duration = Duration::from_secs(1);

/// Least time between two status reports that a change (a pause, a new assignment) sends
/// before the next one is due.
const STATUS_CHANGE_MIN: Duration = Duration::from_millis(500);

/// How long one poll waits while draining at shutdown.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Rung by the client when one of its queues (the consumer's own, or a partition's) goes
/// from empty to non-empty; an idle poll loop waits on it, so a record that arrives is
/// dispatched at once rather than on the loop's next pass (up to [`IDLE_WAIT`] later: half
/// of that, on average, was the delivery delay of every record of an idle stage).
#[derive(Debug, Default)]
pub(super) struct Wake {
    rung: Mutex<bool>,
    cond: Condvar,
}

impl Wake {
    /// Called by librdkafka's threads (with a queue's lock held): only flags and signals.
    pub(super) fn ring(&self) {
        *self.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.cond.notify_one();
    }

    /// Waits until rung or `timeout`, and resets the bell.
    fn wait(&self, timeout: Duration) {
        let rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut rung, _) = self
            .cond
            .wait_timeout_while(rung, timeout, |rung| !*rung)
            .unwrap_or_else(PoisonError::into_inner);
        *rung = false;
    }
}

/// Partition queues split off the consumer, each with its partition.
pub(super) type SplitQueues<H> = Vec<(Tp, PartitionQueue<Ctx<H>>)>;

/// The poll thread: feeds the workers and keeps the group membership alive.
pub(super) struct PollLoop<'a, H: Handler> {
    consumer: &'a Arc<BaseConsumer<Ctx<H>>>,
    stop: &'a AtomicBool,
    health: &'a Health,
    grace: Duration,
    /// One client queue per owned partition, read only while there is room. Kept here, not in
    /// the context: a queue holds the consumer, and the consumer holds the context.
    queues: Vec<(Tp, PartitionQueue<Ctx<H>>)>,
    /// Where the next round-robin pass starts.
    next_queue: usize,
    /// Rung when a queue receives something (see [`Wake`]).
    wake: Arc<Wake>,
    /// Whether the last poll of the consumer's own queue returned something.
    consumer_busy: bool,
    last_metrics: Instant,
    /// `--max-rate`: records that may still start now (refilled at `rate` per second).
    rate: f64,
    tokens: f64,
    last_refill: Instant,
    /// `--commit-interval`: least time between two commits.
    commit_interval: Duration,
    /// When the last commit was started.
    last_commit: Instant,
    /// Status reports (`--status-topic`), if on.
    status: Option<crate::status::Reporter>,
    /// When the last report went, and what it said (paused, partitions).
    last_status: Option<(Instant, bool, HashSet<Tp>)>,
}

impl<'a, H: Handler> PollLoop<'a, H> {
    pub(super) fn new(
        consumer: &'a Arc<BaseConsumer<Ctx<H>>>,
        stop: &'a AtomicBool,
        health: &'a Health,
        grace: Duration,
        max_rate: f64,
        status: Option<crate::status::Reporter>,
        wake: Arc<Wake>,
    ) -> Self {
        PollLoop {
            consumer,
            stop,
            health,
            grace,
            queues: Vec::new(),
            next_queue: 0,
            wake,
            consumer_busy: false,
            last_metrics: Instant::now(),
            rate: if max_rate.is_finite() {
                max_rate.max(0.0)
            } else {
                0.0
            },
            tokens: 1.0,
            last_refill: Instant::now(),
            commit_interval: Duration::ZERO,
            last_commit: Instant::now(),
            status,
            last_status: None,
        }
    }

    /// Commits at most once per `interval` (`--commit-interval`; zero: on every move).
    pub(super) fn commit_every(mut self, interval: Duration) -> Self {
        self.commit_interval = interval;
        self
    }

    /// Starts with these partition queues, split off before their assignment.
    pub(super) fn with_queues(mut self, split: SplitQueues<H>) -> Self {
        for (tp, mut q) in split {
            let wake = self.wake.clone();
            q.set_nonempty_callback(move || wake.ring());
            self.queues.push((tp, q));
        }
        self
    }

    /// `room` limited by `--max-rate` (a token bucket holding at most a tenth of a
    /// second's records, at least one).
    fn throttle(&mut self, room: usize) -> usize {
        if self.rate <= 0.0 {
            return room;
        }
        let now = Instant::now();
        let burst = (self.rate / 10.0).max(1.0);
        self.tokens = (self.tokens
            + now.duration_since(self.last_refill).as_secs_f64() * self.rate)
            .min(burst);
        self.last_refill = now;
        room.min(self.tokens.max(0.0).floor() as usize)
    }

    /// Runs until `stop` is set, then drains within the grace period, commits and leaves.
    pub(super) fn run(mut self) -> Result<(), RuntimeError> {
        let mut fatal = None;
        while !self.stop.load(Ordering::SeqCst) {
            self.health.polled();
            if let Some(why) = self.state().fatal.clone() {
                fatal = Some(why);
                break;
            }
            let (owned, room) = self.housekeeping();
            if self.state().ranges_done() {
                tracing::info!("every assigned range is done");
                break;
            }
            self.sync_partition_queues(owned);
            let allowed = self.throttle(room);
            let (left, dispatched) = self.dispatch_from_queues(allowed);
            let room = room - (allowed - left);
            self.tokens -= (allowed - left) as f64;
            if self.poll_consumer(room, dispatched) {
                self.tokens -= 1.0;
            }
        }
        self.stop_intake();
        self.drain_within_grace();
        self.commit_and_leave();
        match fatal {
            Some(why) => Err(RuntimeError::Positions(why)),
            None => Ok(()),
        }
    }

    /// The state is shared with the client callbacks, which run inside `poll` calls on this
    /// thread: never hold it across a poll.
    fn state(&self) -> MutexGuard<'a, State<H>> {
        let consumer: &'a Arc<BaseConsumer<Ctx<H>>> = self.consumer;
        consumer.context().lock()
    }

    /// Takes in completions, stores the advanced offsets and commits them when due, pauses
    /// or resumes, refreshes the gauges when due. Returns the partitions owned and the room
    /// for new records.
    fn housekeeping(&mut self) -> (HashSet<Tp>, usize) {
        let mut st = self.state();
        st.drain();
        st.store(self.consumer);
        if self
            .consumer
            .context()
            .commits()
            .failed
            .swap(false, Ordering::SeqCst)
        {
            st.uncommitted = true;
        }
        if st.uncommitted && self.last_commit.elapsed() >= self.commit_interval {
            // Asynchronous: the result comes to the commit callback on a later poll.
            st.uncommitted = false;
            self.last_commit = Instant::now();
            if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Async) {
                tracing::debug!(error = %e, "offset commit not started");
                st.uncommitted = true;
            }
        }
        st.update_pause(self.consumer);
        if self.last_metrics.elapsed() >= METRICS_EVERY {
            st.update_metrics();
            self.last_metrics = Instant::now();
        }
        let owned = st.owned();
        if let Some(reporter) = &self.status {
            let paused = st.is_paused();
            let send = match &self.last_status {
                None => true,
                Some((at, was_paused, was_owned)) => {
                    at.elapsed() >= reporter.interval
                        || (at.elapsed() >= STATUS_CHANGE_MIN
                            && (*was_paused != paused || *was_owned != owned))
                }
            };
            if send {
                reporter.send(&st.shared.runtime, &st.status(reporter, false));
                self.last_status = Some((Instant::now(), paused, owned.clone()));
            }
        }
        (owned, st.room())
    }

    /// Keeps one split-off client queue per owned partition.
    fn sync_partition_queues(&mut self, owned: HashSet<Tp>) {
        self.queues.retain(|(tp, _)| owned.contains(tp));
        for tp in owned {
            if !self.queues.iter().any(|(q, _)| *q == tp)
                && let Some(mut q) = self.consumer.split_partition_queue(&tp.0, tp.1)
            {
                let wake = self.wake.clone();
                q.set_nonempty_callback(move || wake.ring());
                self.queues.push((tp, q));
            }
        }
    }

    /// Round-robin over the partition queues, one record per queue per pass, while there is
    /// room: every partition makes progress, none is favoured. Returns the room left and
    /// whether anything was dispatched.
    fn dispatch_from_queues(&mut self, mut room: usize) -> (usize, bool) {
        let mut progressed = true;
        let mut dispatched = false;
        while room > 0 && progressed && !self.queues.is_empty() {
            progressed = false;
            for i in 0..self.queues.len() {
                if room == 0 {
                    break;
                }
                let idx = (self.next_queue + i) % self.queues.len();
                match self.queues[idx].1.poll(Duration::ZERO) {
                    Some(Ok(m)) => {
                        let record = Record::from_message(&m);
                        drop(m);
                        self.state().dispatch(record);
                        room -= 1;
                        progressed = true;
                        dispatched = true;
                    }
                    Some(Err(e)) => tracing::warn!(error = %e, "partition queue error"),
                    None => {}
                }
            }
            self.next_queue = self.next_queue.wrapping_add(1);
        }
        (room, dispatched)
    }

    /// The consumer itself: rebalances, stats, errors, and records of partitions whose queue
    /// is not split yet (returns whether it dispatched one). Polling it is what keeps max.poll.interval.ms satisfied. It waits a
    /// little only when this pass found nothing to do.
    fn poll_consumer(&mut self, room: usize, dispatched: bool) -> bool {
        let wait = if dispatched || self.consumer_busy {
            // The consumer's own queue rings only when it goes from empty to non-empty: while
            // its last poll returned something, more may be waiting.
            Duration::ZERO
        } else if room == 0 {
            // Full: wake on the first completion rather than on a timer.
            self.state().wait_for_completion(IDLE_WAIT);
            Duration::ZERO
        } else {
            // Nothing to do: sleep until a queue receives something (or a pass is due).
            self.wake.wait(IDLE_WAIT);
            Duration::ZERO
        };
        let polled = self.consumer.poll(wait);
        self.consumer_busy = polled.is_some();
        match polled {
            None => false,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "consumer error");
                false
            }
            Some(Ok(m)) => {
                let record = Record::from_message(&m);
                drop(m);
                self.state().dispatch(record);
                true
            }
        }
    }

    /// Pauses the assignment and closes the partition queues: nothing new is dispatched.
    fn stop_intake(&mut self) {
        self.state().set_paused(self.consumer, true);
        self.queues.clear();
    }

    /// Waits for the running records, storing offsets as they finish, until none is left or
    /// the grace period is over. Keeps polling meanwhile so the group membership holds.
    fn drain_within_grace(&self) {
        let deadline = Instant::now() + self.grace;
        loop {
            self.health.polled();
            {
                let mut st = self.state();
                st.drain();
                st.store(self.consumer);
                let running = st.running();
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
            if let Some(Ok(m)) = self.consumer.poll(DRAIN_POLL) {
                tracing::debug!(
                    offset = m.offset(),
                    "record after stop not dispatched; it will be redelivered"
                );
            }
        }
    }

    /// Commits the stored offsets and leaves the group.
    fn commit_and_leave(&self) {
        {
            let mut st = self.state();
            st.update_metrics();
            // The grace is spent: the revoke that leaving the group runs must not wait again,
            // and records still waiting for a slot, a retry or a DLQ write give up (they are
            // redelivered).
            st.revoke_timeout = Duration::ZERO;
            st.shared.cancel.cancel();
        }
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => tracing::info!("offsets committed"),
            Err(e) => {
                tracing::debug!(error = %e, "final commit: nothing to commit or not possible")
            }
        }
        self.consumer.unsubscribe();
        if let Some(reporter) = &self.status {
            {
                let st = self.state();
                let mut last = st.status(reporter, true);
                last.assigned.clear();
                last.in_flight = 0;
                reporter.send(&st.shared.runtime, &last);
            }
            reporter.flush();
        }
    }
}
