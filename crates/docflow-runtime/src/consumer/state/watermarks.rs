//! Where the done watermarks go: the client's offset store (the poll loop commits them) and,
//! with a position store, that store too, in the background as they advance and at once on
//! revoke; and where newly assigned partitions start when a position store places them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::consumer::Tp;
use crate::handler::Handler;

use super::rebalance::tps_of;
use super::{Ctx, State};

/// Tries at loading the positions of newly assigned partitions before the replica stops.
const POSITION_LOAD_ATTEMPTS: u32 = 3;
/// Pause between those tries.
const POSITION_LOAD_BACKOFF: Duration = Duration::from_secs(1);
/// Least time between two background position saves.
const POSITION_SAVE_EVERY: Duration = Duration::from_millis(500);
/// Longest one load or save of positions may take.
const POSITION_LOAD_TIMEOUT: Duration = Duration::from_secs(5);

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

impl<H: Handler> State<H> {
    /// Hands every advanced watermark to the client's offset store (the poll loop commits
    /// it, at most once per `--commit-interval`).
    pub(in crate::consumer) fn store(&mut self, consumer: &BaseConsumer<Ctx<H>>) {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), t) in &mut self.trackers {
            if let Some(w) = t.take_store() {
                let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(w));
                if self.shared.positions.is_some() {
                    self.unsaved.insert((topic.clone(), *partition), w);
                }
            }
        }
        if tpl.count() > 0 {
            match consumer.store_offsets(&tpl) {
                Ok(()) => self.uncommitted = true,
                Err(e) => tracing::warn!(error = %e, "storing offsets failed"),
            }
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
    pub(super) fn place(&mut self, consumer: &BaseConsumer<Ctx<H>>, tpl: &mut TopicPartitionList) {
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
    pub(super) fn save_positions_now(&mut self, tps: &[Tp]) {
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
}
