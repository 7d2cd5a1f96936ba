//! The client callbacks that reach the state, statistics (high watermarks) and rebalances,
//! and what they do to it: assign (a tracker per partition), revoke (drop queued records,
//! await running ones, commit), and `--assign-range`'s fixed assignment. librdkafka runs
//! the callbacks on the thread that polls.

use std::collections::HashSet;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, RebalanceProtocol,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};

use crate::consumer::Tp;
use crate::consumer::tracker::PartitionTracker;
use crate::handler::Handler;
use crate::metrics::RebalanceKind;

use super::{Ctx, State};

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
    /// Counts the commit; a failed one is committed again by the poll loop (its offsets
    /// stay stored). Takes no lock: a synchronous commit made under the state's lock may
    /// call it.
    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        match result {
            Ok(()) => self.commits().metrics.commit(&self.group, true),
            // Nothing had moved since the last commit: not a commit at all.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                tracing::debug!(group = %self.group, error = %e, "offset commit failed; committing again");
                self.commits().metrics.commit(&self.group, false);
                self.commits()
                    .failed
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

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

pub(super) fn tps_of(tpl: &TopicPartitionList) -> Vec<Tp> {
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
    fn running_in(&self, tps: &HashSet<&Tp>) -> usize {
        self.trackers
            .iter()
            .filter(|(tp, _)| tps.contains(tp))
            .map(|(_, t)| t.in_flight())
            .sum()
    }

    fn revoke(&mut self, consumer: &BaseConsumer<Ctx<H>>, tps: &[Tp], lost: bool) {
        let kind = if lost {
            RebalanceKind::Lost
        } else {
            RebalanceKind::Revoke
        };
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
            // Store as well as commit: the poll loop's next commit sends the stored offsets,
            // and an older stored offset would move the group's position back (a
            // redelivery).
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
    pub(in crate::consumer) fn assign_ranges(
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
    pub(in crate::consumer) fn ranges_done(&self) -> bool {
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
        self.gauges().rebalanced(RebalanceKind::Assign);
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
