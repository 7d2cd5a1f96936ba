//! Consumer runtime benchmarks on the embedded broker.
//!
//! 1. Throughput: a no-op handler under the runtime versus a bare librdkafka consumer reading
//!    the same records from the same broker (the work `kcat -C` does), as a ratio.
//! 2. Latency: a heavy-tailed mix (90 % 60 ms, 10 % 2,400 ms) arriving at a fixed rate,
//!    end-to-end p50/p99 with the pooled runtime versus strict in-order per-partition
//!    processing with the same number of workers.
//!
//! `make bench` runs it and writes `bench/results/runtime.md`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use docflow_config::{ConsumerArgs, KafkaArgs};
use docflow_runtime::metrics::now_ms;
use docflow_runtime::producer::idempotent_producer;
use docflow_runtime::{Handler, HandlerError, Record};
use docflow_stack::{Stack, unique_name};
use rand::{Rng, SeedableRng};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

#[derive(Debug, Parser)]
struct Args {
    /// Records for the throughput run.
    #[arg(long, default_value_t = 50_000)]
    records: usize,
    /// Partitions of the benchmark topics.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Records in the latency run.
    #[arg(long, default_value_t = 360)]
    latency_records: usize,
    /// Arrival rate of the latency run, records/s.
    #[arg(long, default_value_t = 12.0)]
    rate: f64,
    /// Workers (pooled) = partitions served in order (strict) in the latency run.
    #[arg(long, default_value_t = 6)]
    workers: usize,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/runtime.md")]
    out: std::path::PathBuf,
}

/// A plain consumer reading every partition of `topic` from the beginning, no group
/// membership, no commits.
fn from_beginning(
    kafka: &KafkaArgs,
    name: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<BaseConsumer> {
    let c: BaseConsumer = kafka
        .client_config(name)
        .set("group.id", unique_name(name))
        .set("enable.auto.commit", "false")
        // The runtime's setting, so both sides fetch alike.
        .set("fetch.wait.max.ms", "100")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    c.assign(&tpl)?;
    Ok(c)
}

/// A bare consumer: assign every partition from the beginning and count.
fn bare_consume(
    kafka: &KafkaArgs,
    topic: &str,
    partitions: i32,
    n: usize,
) -> anyhow::Result<Duration> {
    let c = from_beginning(kafka, "bench-bare", topic, partitions)?;
    let start = Instant::now();
    let mut got = 0;
    while got < n {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            m?;
            got += 1;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "bare consumer stalled at {got}"
        );
    }
    Ok(start.elapsed())
}

/// Sleeps as the payload says and records end-to-end latency.
#[derive(Default)]
struct Sleeper {
    latencies: Mutex<Vec<i64>>,
}

fn service_of(payload: &[u8]) -> Duration {
    if payload.first() == Some(&b'S') {
        Duration::from_millis(2_400)
    } else {
        Duration::from_millis(60)
    }
}

impl Handler for Sleeper {
    type Input = ();

    async fn decode(&self, _record: &Record) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle(&self, record: &Record, (): &()) -> Result<(), HandlerError> {
        let payload = record.payload.as_deref().unwrap_or_default();
        tokio::time::sleep(service_of(payload)).await;
        let ts = record.timestamp_ms.unwrap_or_else(now_ms);
        if let Ok(mut l) = self.latencies.lock() {
            l.push(now_ms() - ts);
        }
        Ok(())
    }
}

/// Produces the heavy-tailed mix at a fixed rate; the classes come from a fixed seed, so
/// both runs see the same sequence.
async fn produce_paced(kafka: &KafkaArgs, topic: &str, n: usize, rate: f64) -> anyhow::Result<()> {
    let producer = idempotent_producer(kafka, "bench-paced")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut tick = tokio::time::interval(interval);
    for i in 0..n {
        tick.tick().await;
        let slow = rng.random_bool(0.10);
        let payload = format!("{}{i:06}", if slow { 'S' } else { 'F' });
        let key = format!("k{i}");
        producer
            .send(
                FutureRecord::to(topic).key(&key).payload(&payload),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)?;
    }
    Ok(())
}

/// Strict in-order per-partition processing: one sequential worker per partition.
async fn strict_in_order(
    kafka: &KafkaArgs,
    topic: &str,
    partitions: i32,
    n: usize,
) -> anyhow::Result<Vec<i64>> {
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut senders = HashMap::new();
    let mut workers = Vec::new();
    for p in 0..partitions {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Vec<u8>, i64)>();
        senders.insert(p, tx);
        let l = latencies.clone();
        workers.push(tokio::spawn(async move {
            while let Some((payload, ts)) = rx.recv().await {
                tokio::time::sleep(service_of(&payload)).await;
                if let Ok(mut l) = l.lock() {
                    l.push(now_ms() - ts);
                }
            }
        }));
    }
    let k = kafka.clone();
    let t = topic.to_owned();
    let poller = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let c = from_beginning(&k, "bench-strict", &t, partitions)?;
        let mut got = 0;
        let start = Instant::now();
        while got < n && start.elapsed() < Duration::from_secs(600) {
            if let Some(m) = c.poll(Duration::from_millis(100)) {
                let m = m?;
                let payload = m.payload().unwrap_or_default().to_vec();
                let ts = m.timestamp().to_millis().unwrap_or_else(now_ms);
                if let Some(tx) = senders.get(&m.partition()) {
                    let _ = tx.send((payload, ts));
                }
                got += 1;
            }
        }
        Ok(())
    });
    poller.await??;
    for w in workers {
        w.await?;
    }
    let l = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    Ok(l)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    docflow_store::stats::quantile(sorted, p / 100.0).unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stack = Stack::builder()
        .sqlite()
        .start()
        .await
        .context("starting the embedded broker")?;
    let kafka = stack.kafka();

    // 1. Throughput.
    let topic = stack.topic("bench-throughput", args.partitions).await?;
    docflow_bench::produce(&kafka, &topic, args.records, None, |i| {
        (format!("k{i}"), format!("{i:08}"))
    })
    .await?;
    let (k, t, parts, n) = (kafka.clone(), topic.clone(), args.partitions, args.records);
    let bare = tokio::task::spawn_blocking(move || bare_consume(&k, &t, parts, n)).await??;
    let noop = Arc::new(docflow_bench::Noop::default());
    let h = noop.clone();
    let consumer = ConsumerArgs {
        workers: 8,
        buffer: 64,
        ..ConsumerArgs::default()
    };
    let runtime = docflow_bench::run_runtime(&kafka, &topic, consumer, noop.clone(), move || {
        h.done.load(Ordering::Relaxed) >= n
    })
    .await?;
    let bare_rate = args.records as f64 / bare.as_secs_f64();
    let runtime_rate = args.records as f64 / runtime.as_secs_f64();
    println!("throughput: bare {bare_rate:.0}/s, runtime {runtime_rate:.0}/s");

    // 2. Latency of the heavy-tailed mix.
    let mut latency_rows = Vec::new();
    for mode in ["pooled", "strict"] {
        let topic = stack.topic("bench-latency", args.partitions).await?;
        let producing = {
            let (k, t) = (kafka.clone(), topic.clone());
            let (n, rate) = (args.latency_records, args.rate);
            tokio::spawn(async move { produce_paced(&k, &t, n, rate).await })
        };
        let mut lat = if mode == "pooled" {
            let sleeper = Arc::new(Sleeper::default());
            let s = sleeper.clone();
            let n = args.latency_records;
            let consumer = ConsumerArgs {
                workers: args.workers,
                buffer: args.workers,
                ..ConsumerArgs::default()
            };
            docflow_bench::run_runtime(&kafka, &topic, consumer, sleeper.clone(), move || {
                s.latencies.lock().map(|l| l.len() >= n).unwrap_or(false)
            })
            .await?;
            sleeper
                .latencies
                .lock()
                .map(|l| l.clone())
                .unwrap_or_default()
        } else {
            strict_in_order(&kafka, &topic, args.partitions, args.latency_records).await?
        };
        producing.await??;
        lat.sort_unstable();
        let row = (
            mode,
            percentile(&lat, 50.0),
            percentile(&lat, 99.0),
            lat.last().copied().unwrap_or(0),
            lat.len(),
        );
        println!(
            "latency {mode}: p50 {} ms, p99 {} ms, max {} ms over {}",
            row.1, row.2, row.3, row.4
        );
        latency_rows.push(row);
    }

    let mut md = docflow_bench::report_head(
        "Consumer runtime benchmarks",
        "runtime-bench",
        "broker: embedded Nisshi (memory storage) on loopback",
    );
    writeln!(
        md,
        "## Throughput, no-op handler, {} records, {} partitions\n",
        args.records, args.partitions
    )?;
    writeln!(md, "| consumer | time | records/s |\n|---|---|---|")?;
    writeln!(
        md,
        "| bare librdkafka consumer (assign, poll, count) | {:.2} s | {bare_rate:.0} |",
        bare.as_secs_f64()
    )?;
    writeln!(
        md,
        "| docflow runtime (8 workers, buffer 64, group, offset store + commit) | {:.2} s | {runtime_rate:.0} |",
        runtime.as_secs_f64()
    )?;
    writeln!(
        md,
        "\nRatio runtime / bare: **{:.2}**\n",
        runtime_rate / bare_rate
    )?;
    writeln!(
        md,
        "## Latency, heavy-tailed mix (90 % 60 ms, 10 % 2,400 ms), {} records at {}/s, {} workers\n",
        args.latency_records, args.rate, args.workers
    )?;
    writeln!(md, "End-to-end: record timestamp to handler done.\n")?;
    writeln!(
        md,
        "| processing | p50 | p99 | max | records |\n|---|---|---|---|---|"
    )?;
    for (mode, p50, p99, max, n) in &latency_rows {
        let name = if *mode == "pooled" {
            "pooled runtime (one queue, any worker)"
        } else {
            "strict in-order per partition (one worker each)"
        };
        writeln!(md, "| {name} | {p50} ms | {p99} ms | {max} ms | {n} |")?;
    }
    if let [(_, _, pooled99, ..), (_, _, strict99, ..)] = latency_rows.as_slice() {
        writeln!(
            md,
            "\np99 strict / pooled: **{:.2}**",
            *strict99 as f64 / (*pooled99).max(1) as f64
        )?;
    }
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}
