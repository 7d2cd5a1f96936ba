//! The poll thread's metric bookkeeping: gauges of what it owns (in flight, assigned, paused,
//! lag per partition) and the rebalance counter. The workers count their own outcomes.

use std::collections::HashMap;

use crate::metrics::{ConsumerMetrics, RebalanceKind, now_ms};

use super::Tp;
use super::tracker::PartitionTracker;

/// The metrics of one consumer group.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gauges<'a> {
    metrics: &'a ConsumerMetrics,
    group: &'a str,
}

impl<'a> Gauges<'a> {
    pub(super) fn new(metrics: &'a ConsumerMetrics, group: &'a str) -> Self {
        Gauges { metrics, group }
    }

    /// A rebalance callback of `kind`.
    pub(super) fn rebalanced(&self, kind: RebalanceKind) {
        self.metrics.rebalance(self.group, kind);
    }

    /// `partitions` are paused now (0: resumed).
    pub(super) fn paused(&self, partitions: usize) {
        self.metrics.set_paused_partitions(self.group, partitions);
    }

    /// Records in flight, partitions assigned, and each partition's lag.
    pub(super) fn update(&self, in_flight: usize, trackers: &HashMap<Tp, PartitionTracker>) {
        let m = self.metrics;
        let g = self.group;
        m.set_in_flight(g, in_flight);
        m.set_assigned_partitions(g, trackers.len());
        let now = now_ms();
        for ((topic, partition), t) in trackers {
            m.set_partition_lag(g, topic, *partition, t.lag_records(), t.lag_seconds(now));
        }
    }

    /// Drops the lag series of a partition no longer owned, so that a stale value is not
    /// reported for it forever (its new owner reports it).
    pub(super) fn forget_partition(&self, (topic, partition): &Tp) {
        self.metrics.forget_partition(self.group, topic, *partition);
    }
}
