//! Per-key ordering (`--per-key-ordering`): records with the same key run one at a time, in
//! dispatch order, across partitions; records with other keys, and keyless ones, are not held
//! up by them.
//!
//! A key has an entry exactly while one of its records runs; the entry's queue holds the
//! records waiting behind it. Queued records already count as in flight (and are in their
//! partition's tracker), so the watermark never passes them.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};

use super::{Job, Tp};

/// The per-key queues of one consumer (owned by the poll thread).
#[derive(Debug)]
pub(super) struct KeyQueues {
    /// Off: every job starts at once and nothing is ever queued.
    enabled: bool,
    queues: HashMap<Vec<u8>, VecDeque<Job>>,
}

impl KeyQueues {
    pub(super) fn new(enabled: bool) -> Self {
        KeyQueues {
            enabled,
            queues: HashMap::new(),
        }
    }

    /// A dispatched job: returned if it may start now, kept (None) if a job with its key runs.
    pub(super) fn admit(&mut self, job: Job) -> Option<Job> {
        if self.enabled
            && let Some(key) = job.record.key.clone()
        {
            match self.queues.entry(key) {
                Entry::Occupied(mut queue) => {
                    queue.get_mut().push_back(job);
                    return None;
                }
                Entry::Vacant(free) => {
                    free.insert(VecDeque::new());
                }
            }
        }
        Some(job)
    }

    /// A job with `key` finished: the next job queued behind it, to start now. With none
    /// queued, the key is free again.
    pub(super) fn next_after(&mut self, key: Option<&[u8]>) -> Option<Job> {
        if !self.enabled {
            return None;
        }
        let key = key?;
        let next = self.queues.get_mut(key).and_then(VecDeque::pop_front);
        if next.is_none() {
            self.queues.remove(key);
        }
        next
    }

    /// Takes out the queued jobs of `revoked` partitions: they must never start here. Jobs
    /// that run keep their key (a job queued behind one still waits for it).
    pub(super) fn drop_partitions(&mut self, revoked: &HashSet<&Tp>) -> Vec<Job> {
        let mut dropped = Vec::new();
        for queue in self.queues.values_mut() {
            let (gone, kept): (VecDeque<Job>, VecDeque<Job>) = queue.drain(..).partition(|job| {
                revoked.contains(&(job.record.topic.clone(), job.record.partition))
            });
            *queue = kept;
            dropped.extend(gone);
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::Record;
    use crate::trace::TraceContext;

    fn job(topic: &str, partition: i32, offset: i64, key: Option<&str>) -> Job {
        Job {
            record: Record {
                topic: topic.to_owned(),
                partition,
                offset,
                key: key.map(|k| k.as_bytes().to_vec()),
                payload: None,
                headers: Vec::new(),
                timestamp_ms: None,
                attempt: 1,
                trace: TraceContext::new_root(),
            },
            epoch: 1,
        }
    }

    fn offset(job: Option<Job>) -> Option<i64> {
        job.map(|j| j.record.offset)
    }

    #[test]
    fn same_key_jobs_wait_for_the_running_one() {
        let mut q = KeyQueues::new(true);
        assert_eq!(offset(q.admit(job("t", 0, 1, Some("a")))), Some(1));
        assert_eq!(offset(q.admit(job("t", 0, 2, Some("a")))), None);
        // The key orders across partitions too.
        assert_eq!(offset(q.admit(job("t", 1, 9, Some("a")))), None);
    }

    #[test]
    fn different_keys_and_keyless_jobs_run_at_once() {
        let mut q = KeyQueues::new(true);
        assert_eq!(offset(q.admit(job("t", 0, 1, Some("a")))), Some(1));
        assert_eq!(offset(q.admit(job("t", 0, 2, Some("b")))), Some(2));
        assert_eq!(offset(q.admit(job("t", 0, 3, None))), Some(3));
        assert_eq!(offset(q.admit(job("t", 0, 4, None))), Some(4));
        assert_eq!(offset(q.next_after(None)), None);
    }

    #[test]
    fn completion_releases_the_next_job_of_the_key_in_order() {
        let mut q = KeyQueues::new(true);
        for o in 1..=3 {
            q.admit(job("t", 0, o, Some("a")));
        }
        q.admit(job("t", 0, 4, Some("b")));
        assert_eq!(offset(q.next_after(Some(b"a"))), Some(2));
        assert_eq!(offset(q.next_after(Some(b"a"))), Some(3));
        assert_eq!(offset(q.next_after(Some(b"a"))), None);
        // Nothing of the key runs any more: the next one starts at once.
        assert_eq!(offset(q.admit(job("t", 0, 5, Some("a")))), Some(5));
        // "b" still runs.
        assert_eq!(offset(q.admit(job("t", 0, 6, Some("b")))), None);
    }

    #[test]
    fn revoke_drops_only_the_revoked_partitions_queued_jobs() {
        let mut q = KeyQueues::new(true);
        q.admit(job("t", 0, 1, Some("a"))); // runs
        q.admit(job("t", 0, 2, Some("a")));
        q.admit(job("t", 1, 3, Some("a")));
        q.admit(job("u", 0, 4, Some("a")));
        q.admit(job("t", 1, 5, Some("b"))); // runs
        q.admit(job("t", 0, 6, Some("b")));
        let revoked_tp = ("t".to_owned(), 0);
        let revoked: HashSet<&Tp> = [&revoked_tp].into_iter().collect();
        let mut dropped: Vec<i64> = q
            .drop_partitions(&revoked)
            .into_iter()
            .map(|j| j.record.offset)
            .collect();
        dropped.sort_unstable();
        assert_eq!(dropped, vec![2, 6]);
        // The survivors keep their order; the running jobs keep their keys.
        assert_eq!(offset(q.admit(job("t", 1, 7, Some("a")))), None);
        assert_eq!(offset(q.next_after(Some(b"a"))), Some(3));
        assert_eq!(offset(q.next_after(Some(b"a"))), Some(4));
        assert_eq!(offset(q.next_after(Some(b"a"))), Some(7));
        assert_eq!(offset(q.next_after(Some(b"b"))), None);
        assert!(q.drop_partitions(&revoked).is_empty());
    }

    #[test]
    fn without_per_key_ordering_nothing_waits() {
        let mut q = KeyQueues::new(false);
        assert_eq!(offset(q.admit(job("t", 0, 1, Some("a")))), Some(1));
        assert_eq!(offset(q.admit(job("t", 0, 2, Some("a")))), Some(2));
        assert_eq!(offset(q.next_after(Some(b"a"))), None);
    }
}
