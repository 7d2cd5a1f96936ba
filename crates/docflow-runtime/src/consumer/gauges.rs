//! The poll thread's metric bookkeeping: gauges of what it owns (in flight, assigned, paused,
//! lag per partition) and the rebalance counter. The workers count their own outcomes.

use std::collections::HashMap;

use crate::metrics::{ConsumerMetrics, now_ms};

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

    /// A rebalance callback: `kind` is `assign`, `revoke` or `lost` (a label value).
    pub(super) fn rebalanced(&self, kind: &'static str) {
        self.metrics
            .rebalances
            .with_label_values(&[self.group, kind])
            .inc();
    }

    /// `partitions` are paused now (0: resumed).
    pub(super) fn paused(&self, partitions: usize) {
        self.metrics
            .paused_partitions
            .with_label_values(&[self.group])
            .set(gauge(partitions));
    }

    /// Records in flight, partitions assigned, and each partition's lag.
    pub(super) fn update(&self, in_flight: usize, trackers: &HashMap<Tp, PartitionTracker>) {
        let m = self.metrics;
        let g = self.group;
        m.in_flight.with_label_values(&[g]).set(gauge(in_flight));
        m.assigned_partitions
            .with_label_values(&[g])
            .set(gauge(trackers.len()));
        let now = now_ms();
        for ((topic, partition), t) in trackers {
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

    /// Drops the lag series of a partition no longer owned, so that a stale value is not
    /// reported for it forever (its new owner reports it).
    pub(super) fn forget_partition(&self, (topic, partition): &Tp) {
        let labels = [self.group, topic.as_str(), &partition.to_string()];
        let _ = self.metrics.lag_records.remove_label_values(&labels);
        let _ = self.metrics.lag_seconds.remove_label_values(&labels);
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
