//! Per-partition offset tracking for a pooled consumer.
//!
//! Records of one partition are dispatched in offset order but may finish in any order. The
//! offset that may be committed is the contiguous completed watermark: the lowest offset
//! still in flight, or one past the highest dispatched offset when nothing is in flight.
//! Committing it can never skip an unfinished record.

use std::collections::BTreeMap;

/// Offsets in flight for one assigned partition.
#[derive(Debug, Clone)]
pub(crate) struct PartitionTracker {
    /// Assignment generation; completions from an earlier assignment are ignored.
    pub(crate) epoch: u64,
    /// Offset → record timestamp (ms), for records dispatched and not finished.
    in_flight: BTreeMap<i64, Option<i64>>,
    /// One past the highest dispatched offset.
    next: Option<i64>,
    /// Lowest offset given up on (dropped from a queue at revoke): never passed.
    floor: Option<i64>,
    /// The last offset handed to the client's offset store.
    stored: Option<i64>,
    /// Timestamp of the highest dispatched record.
    last_timestamp_ms: Option<i64>,
    /// High watermark (log end offset) last reported by the client.
    pub(crate) high_watermark: Option<i64>,
}

impl PartitionTracker {
    pub(crate) fn new(epoch: u64) -> Self {
        PartitionTracker {
            epoch,
            in_flight: BTreeMap::new(),
            next: None,
            floor: None,
            stored: None,
            last_timestamp_ms: None,
            high_watermark: None,
        }
    }

    /// A record was handed to the workers.
    pub(crate) fn dispatched(&mut self, offset: i64, timestamp_ms: Option<i64>) {
        self.in_flight.insert(offset, timestamp_ms);
        if self.next.is_none_or(|n| offset + 1 > n) {
            self.next = Some(offset + 1);
            self.last_timestamp_ms = timestamp_ms.or(self.last_timestamp_ms);
        }
    }

    /// A record finished (handled or dead-lettered). Returns false if it was not in flight.
    pub(crate) fn completed(&mut self, offset: i64) -> bool {
        self.in_flight.remove(&offset).is_some()
    }

    /// Records dispatched and not finished. A record given up on (revoke, shutdown) stays
    /// here, so the watermark never passes it.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// A dispatched record that will not run here (dropped before it started): no longer
    /// waited for, but the watermark never passes it.
    pub(crate) fn abandon(&mut self, offset: i64) {
        if self.in_flight.remove(&offset).is_some() {
            self.floor = Some(self.floor.map_or(offset, |f| f.min(offset)));
        }
    }

    /// The next offset to consume such that everything below it is done.
    pub(crate) fn watermark(&self) -> Option<i64> {
        let w = match self.in_flight.keys().next() {
            Some(first) => Some(*first),
            None => self.next,
        };
        match (w, self.floor) {
            (Some(w), Some(f)) => Some(w.min(f)),
            (w, _) => w,
        }
    }

    /// The watermark if it moved past what was stored; marks it stored.
    pub(crate) fn take_store(&mut self) -> Option<i64> {
        let w = self.watermark()?;
        if self.stored.is_some_and(|s| s >= w) {
            return None;
        }
        self.stored = Some(w);
        Some(w)
    }

    /// Records between the watermark and the log end.
    pub(crate) fn lag_records(&self) -> Option<i64> {
        let hw = self.high_watermark?;
        let w = self.watermark()?;
        Some((hw - w).max(0))
    }

    /// Age of the oldest record not yet done, in seconds at `now_ms`. When nothing is in
    /// flight but the log end is ahead, the newest dispatched record's age is used: the next
    /// record is at least that new, so this bounds the true age from above.
    pub(crate) fn lag_seconds(&self, now_ms: i64) -> f64 {
        let oldest = match self.in_flight.values().next() {
            Some(ts) => *ts,
            None if self.lag_records().unwrap_or(0) > 0 => self.last_timestamp_ms,
            None => None,
        };
        oldest.map_or(0.0, |ts| ((now_ms - ts).max(0) as f64) / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn watermark_waits_for_the_lowest_unfinished() {
        let mut t = PartitionTracker::new(1);
        assert_eq!(t.watermark(), None);
        for o in 10..15 {
            t.dispatched(o, Some(o * 1000));
        }
        assert_eq!(t.watermark(), Some(10));
        assert!(t.completed(12));
        assert!(t.completed(13));
        assert_eq!(t.watermark(), Some(10));
        assert!(t.completed(10));
        assert_eq!(t.watermark(), Some(11));
        assert_eq!(t.take_store(), Some(11));
        assert_eq!(t.take_store(), None);
        assert!(t.completed(11));
        assert!(t.completed(14));
        assert_eq!(t.watermark(), Some(15));
        assert!(!t.completed(14), "double completion is ignored");
        assert_eq!(t.take_store(), Some(15));
    }

    #[test]
    fn abandoned_records_hold_the_watermark() {
        let mut t = PartitionTracker::new(1);
        for o in 0..5 {
            t.dispatched(o, None);
        }
        t.completed(0);
        t.abandon(2);
        t.completed(1);
        t.completed(3);
        t.completed(4);
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.watermark(), Some(2));
    }

    #[test]
    fn lag_in_records_and_seconds() {
        let mut t = PartitionTracker::new(1);
        t.high_watermark = Some(100);
        t.dispatched(40, Some(10_000));
        t.dispatched(41, Some(12_000));
        assert_eq!(t.lag_records(), Some(60));
        assert_eq!(t.lag_seconds(15_000), 5.0);
        t.completed(40);
        assert_eq!(t.lag_seconds(15_000), 3.0);
        t.completed(41);
        // Nothing in flight, log end ahead: bounded by the newest dispatched record.
        assert_eq!(t.lag_seconds(15_000), 3.0);
        t.high_watermark = Some(42);
        assert_eq!(t.lag_records(), Some(0));
        assert_eq!(t.lag_seconds(15_000), 0.0);
    }

    proptest! {
        /// Whatever order records finish in, the stored offset never passes an unfinished
        /// record, and once all finish it reaches one past the last.
        #[test]
        fn stored_offset_never_passes_an_unfinished_record(
            n in 1usize..200,
            order in proptest::collection::vec(any::<proptest::sample::Index>(), 1..200),
        ) {
            let base = 1_000i64;
            let mut t = PartitionTracker::new(7);
            for i in 0..n {
                t.dispatched(base + i as i64, None);
            }
            let mut open: Vec<i64> = (0..n).map(|i| base + i as i64).collect();
            let mut stored_max = base;
            for idx in order {
                if open.is_empty() { break; }
                let o = open.remove(idx.index(open.len()));
                prop_assert!(t.completed(o));
                if let Some(s) = t.take_store() {
                    prop_assert!(s >= stored_max);
                    stored_max = s;
                }
                let lowest_open = open.iter().min().copied();
                if let Some(low) = lowest_open {
                    prop_assert!(stored_max <= low, "stored {} passes unfinished {}", stored_max, low);
                }
            }
            if open.is_empty() {
                prop_assert_eq!(t.watermark(), Some(base + n as i64));
            }
        }
    }
}
