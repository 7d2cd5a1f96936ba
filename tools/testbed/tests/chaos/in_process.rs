use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use docflow_config::ConsumerArgs;
use docflow_runtime::{ConsumerMetrics, ConsumerSpec, Handler, HandlerError, Health, Record};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::support::{Bed, ids};

/// Records finish in random order; the offset committed for the group never passes a record
/// that has not finished.
#[derive(Default)]
struct Scrambler {
    done: Mutex<HashSet<i64>>,
    running_keys: Mutex<HashSet<Vec<u8>>>,
    overlaps: Mutex<u32>,
    order: Mutex<HashMap<Vec<u8>, Vec<i64>>>,
}

impl Handler for Scrambler {
    type Input = ();

    async fn decode(&self, _record: &Record) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle(&self, record: &Record, (): &()) -> Result<(), HandlerError> {
        let key = record.key.clone().unwrap_or_default();
        if !self.running_keys.lock().unwrap().insert(key.clone()) {
            *self.overlaps.lock().unwrap() += 1;
        }
        let ms = rand::random::<u64>() % 40;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.running_keys.lock().unwrap().remove(&key);
        self.order
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .push(record.offset);
        self.done.lock().unwrap().insert(record.offset);
        Ok(())
    }
}

fn committed(bed: &Bed) -> Option<i64> {
    let c: BaseConsumer = bed
        .kafka()
        .client_config("watcher")
        .set("group.id", &bed.group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&bed.topic, 0);
    let got = c.committed_offsets(tpl, Duration::from_secs(5)).ok()?;
    match got.elements().first()?.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

async fn run_scrambled(per_key: bool) -> (Arc<Scrambler>, Bed) {
    let bed = Bed::new(1).await;
    // Keys repeat (k0..k9) so per-key ordering has something to order.
    let payloads = ids("o-", 400);
    let producer = docflow_runtime::producer::idempotent_producer(&bed.kafka(), "p").unwrap();
    for (i, p) in payloads.iter().enumerate() {
        let key = format!("k{}", i % 10);
        producer
            .send(
                rdkafka::producer::FutureRecord::to(&bed.topic)
                    .key(&key)
                    .payload(p),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let handler = Arc::new(Scrambler::default());
    let args = ConsumerArgs {
        workers: 8,
        buffer: 8,
        per_key_ordering: per_key,
        ..ConsumerArgs::default()
    };
    let spec = ConsumerSpec {
        group_id: bed.group.clone(),
        topics: vec![bed.topic.clone()],
        client_id: "in-process".into(),
        producer: None,
        ledger: None,
        positions: None,
    };
    let registry = prometheus::Registry::new();
    let metrics = ConsumerMetrics::new(&registry).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let kafka = bed.kafka();
    let h = handler.clone();
    let task = tokio::spawn(async move {
        docflow_runtime::run(
            &kafka,
            &args,
            spec,
            h,
            metrics,
            Arc::new(Health::default()),
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    // Watch the committed offset while records finish out of order.
    let mut checks = 0;
    loop {
        let c = tokio::task::block_in_place(|| committed(&bed));
        if let Some(c) = c {
            let done = handler.done.lock().unwrap().clone();
            for o in 0..c {
                assert!(
                    done.contains(&o),
                    "committed {c} passes unfinished offset {o}"
                );
            }
            checks += 1;
            if c == 400 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(
        checks > 3,
        "the watcher saw the offset move ({checks} checks)"
    );
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    (handler, bed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offset_never_passes_an_unfinished_record() {
    let (handler, bed) = run_scrambled(false).await;
    // With 8 workers and random durations, records of one key did run concurrently and did
    // finish out of order: the watermark had real work to do.
    let out_of_order = handler
        .order
        .lock()
        .unwrap()
        .values()
        .any(|offsets| offsets.windows(2).any(|w| w[0] > w[1]));
    assert!(out_of_order, "completion order was scrambled");
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_ordering_runs_one_record_per_key_at_a_time() {
    let (handler, bed) = run_scrambled(true).await;
    assert_eq!(
        *handler.overlaps.lock().unwrap(),
        0,
        "no key ran twice at once"
    );
    for (key, offsets) in handler.order.lock().unwrap().iter() {
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "key {key:?} completed out of order: {offsets:?}"
        );
    }
    bed.finish().await;
}
