//! Wakes requests that wait with `?wait=` when a stage announces a result.
//!
//! Every stage produces `doc.processed` (key: the document id) once its result row is
//! committed. Each ingest replica reads that topic from its end, on every partition, with no
//! consumer group (nothing to join, nothing committed, nothing left on the broker), and wakes
//! the requests waiting for that document. The database stays the source of truth: a woken
//! request reads the result store and answers from it; a request that is never woken (the
//! listener not yet assigned, the broker away) still polls the store, only less often.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use docflow_config::KafkaArgs;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Documents being waited for, each with the [`Notify`] its waiters wait on.
#[derive(Debug, Default)]
pub struct Wakeups {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
    /// Never notified: what [`Watch::notify`] would lend if asked during its own drop.
    idle: Notify,
    /// The listener reads every partition from a known offset: no announcement made from
    /// now on is missed.
    armed: AtomicBool,
}

/// A request's interest in one document; dropping it ends the interest.
#[derive(Debug)]
pub struct Watch<'a> {
    wakeups: &'a Wakeups,
    document_id: String,
    /// `Some` until dropped (taken under the map's lock, see `Drop`).
    notify: Option<Arc<Notify>>,
}

impl Watch<'_> {
    /// What to wait on. Create the `notified()` future and `enable()` it before reading the
    /// store, so that an event arriving in between is not missed.
    pub fn notify(&self) -> &Notify {
        // Always `Some` outside `drop`.
        self.notify.as_deref().unwrap_or(&self.wakeups.idle)
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut waiting = self
            .wakeups
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Our reference goes while the lock is held, so two waiters dropping at once cannot
        // both see the other's reference and leave the entry behind.
        drop(self.notify.take());
        if waiting
            .get(&self.document_id)
            .is_some_and(|n| Arc::strong_count(n) == 1)
        {
            waiting.remove(&self.document_id);
        }
    }
}

impl Wakeups {
    /// Starts watching `document_id`.
    pub fn watch(&self, document_id: &str) -> Watch<'_> {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        let notify = waiting
            .entry(document_id.to_owned())
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone();
        Watch {
            wakeups: self,
            document_id: document_id.to_owned(),
            notify: Some(notify),
        }
    }

    /// Wakes every request watching `document_id`.
    pub fn wake(&self, document_id: &str) {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = waiting.get(document_id) {
            n.notify_waiters();
        }
    }

    /// Whether the listener is assigned every partition of the topic (from the offsets at
    /// which it looked), so announcements from now on wake their waiters.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Documents with at least one waiter (tests, metrics).
    pub fn len(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How often the listener looks for partitions added to the topic.
const PARTITION_REFRESH: Duration = Duration::from_secs(30);
/// How soon it tries again when it could not assign itself yet (broker away at start).
const ASSIGN_RETRY: Duration = Duration::from_secs(1);

/// Reads `topic` from its end on every partition and wakes the waiters of each record's key,
/// until `stop`. Errors are logged and retried: waiting requests fall back to polling.
pub async fn listen(
    wakeups: Arc<Wakeups>,
    kafka: KafkaArgs,
    topic: String,
    stop: CancellationToken,
) {
    let mut config = kafka.client_config("docflow-ingest-wakeups");
    if !kafka.options.iter().any(|(k, _)| k == "fetch.wait.max.ms") {
        // An idle fetch is answered after this long, and a broker that does not answer a
        // waiting fetch as soon as data arrives (the embedded one) hands an announcement
        // over up to this late; 20 ms is 50 small requests a second per replica.
        config.set("fetch.wait.max.ms", "20");
    }
    let consumer: StreamConsumer = match config
        // Never joined (partitions are assigned, not subscribed) and never committed to;
        // librdkafka wants a group id all the same.
        .set(
            "group.id",
            format!("docflow-ingest-wakeups-{}", uuid::Uuid::new_v4().simple()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .create()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the doc.processed listener; ?wait= polls the store");
            return;
        }
    };
    let consumer = Arc::new(consumer);
    let mut assigned = 0usize;
    let mut refresh = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(refresh) => {
                // Metadata and watermark look-ups can take seconds with a sick broker: never
                // hold up shutdown for them.
                assigned = tokio::select! {
                    () = stop.cancelled() => return,
                    n = assign_new_partitions(&consumer, &topic, assigned) => n,
                };
                if assigned > 0 {
                    wakeups.armed.store(true, Ordering::Release);
                }
                refresh = tokio::time::Instant::now()
                    + if assigned > 0 { PARTITION_REFRESH } else { ASSIGN_RETRY };
            }
            msg = consumer.recv() => match msg {
                Ok(m) => {
                    if let Some(Ok(id)) = m.key_view::<str>() {
                        wakeups.wake(id);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "doc.processed listener");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            },
        }
    }
}

/// Assigns the partitions of `topic` numbered `assigned..`, each at its log end as the
/// broker reports it now (an explicit offset, so nothing produced after this look is
/// skipped); returns how many are assigned now.
async fn assign_new_partitions(
    consumer: &Arc<StreamConsumer>,
    topic: &str,
    assigned: usize,
) -> usize {
    let (c, t) = (consumer.clone(), topic.to_owned());
    let ends = tokio::task::spawn_blocking(move || {
        let timeout = Duration::from_secs(5);
        let md = c.fetch_metadata(Some(&t), timeout).ok()?;
        let count = md
            .topics()
            .iter()
            .find(|x| x.name() == t && x.error().is_none())
            .map(|x| x.partitions().len())?;
        let mut ends = Vec::new();
        for p in assigned..count {
            let p = i32::try_from(p).ok()?;
            let (_, high) = c.fetch_watermarks(&t, p, timeout).ok()?;
            ends.push((p, high));
        }
        Some(ends)
    })
    .await
    .ok()
    .flatten()
    .unwrap_or_default();
    if ends.is_empty() {
        return assigned;
    }
    let count = assigned + ends.len();
    let mut tpl = TopicPartitionList::new();
    for (p, end) in ends {
        if tpl
            .add_partition_offset(topic, p, Offset::Offset(end))
            .is_err()
        {
            return assigned;
        }
    }
    let done = if assigned == 0 {
        consumer.assign(&tpl)
    } else {
        consumer.incremental_assign(&tpl)
    };
    match done {
        Ok(()) => {
            tracing::debug!(topic, partitions = count, "doc.processed listener assigned");
            count
        }
        Err(e) => {
            tracing::warn!(error = %e, topic, "doc.processed listener cannot assign");
            assigned
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_an_enabled_waiter_and_watches_clean_up() {
        let w = Wakeups::default();
        let a = w.watch("doc");
        let b = w.watch("doc");
        let other = w.watch("other");
        assert_eq!(w.len(), 2);
        {
            let notified = a.notify().notified();
            tokio::pin!(notified);
            // Enabled before the wake (as the waiter does before reading the store): not lost.
            notified.as_mut().enable();
            w.wake("doc");
            tokio::time::timeout(Duration::from_secs(1), notified)
                .await
                .unwrap();
        }
        w.wake("nobody");
        drop(a);
        assert_eq!(w.len(), 2, "b still watches doc");
        drop(b);
        drop(other);
        assert!(w.is_empty());
    }
}
