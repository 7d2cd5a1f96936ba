//! Consumer runtime benchmarks on the embedded broker.
//!
//! 1. Throughput: a no-op handler under the runtime versus a bare librdkafka consumer reading
//!    the same records from the same broker (the work `kcat -C` does), as a ratio.
//! 2. Latency: a heavy-tailed mix (90 % 60 ms, 10 % 2,400 ms) arriving at a fixed rate,
//!    end-to-end p50/p99 with the pooled runtime versus strict in-order per-partition
//!    processing with the same number of workers.
//! 3. Latency at steady rates (100, 1,000, 5,000 records/s) with a 5 ms handler (a sleep;
//!    and a sleep plus one database row per record, as the stages write), the runtime
//!    against its floor: a bare librdkafka consumer handing each record to the same handler
//!    with the same parallelism, no group, no offset bookkeeping, no commits.
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
    /// Arrival rates of the steady-rate latency runs, records/s.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
    steady_rates: Vec<f64>,
    /// Seconds of arrivals per steady-rate run.
    #[arg(long, default_value_t = 10.0)]
    steady_seconds: f64,
    /// Handler time of the steady-rate runs, ms.
    #[arg(long, default_value_t = 5)]
    steady_work_ms: u64,
    /// Workers (and buffer) of both consumers in the steady-rate runs.
    #[arg(long, default_value_t = 64)]
    steady_workers: usize,
    /// The runtime's `--commit-interval` in every run.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    commit_interval: Duration,
    /// Both consumers' `fetch.wait.max.ms` in the steady-rate runs: how long the broker may
    /// hold a fetch that finds nothing. Default: the runtime's (100 ms), or `-X`'s.
    #[arg(long, value_parser = humantime::parse_duration)]
    fetch_wait: Option<Duration>,
    /// Run only the steady-rate runs and print them (no report written): for sweeps of
    /// `--fetch-wait`.
    #[arg(long)]
    steady_only: bool,
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
    let mut config = kafka.client_config(name);
    config
        .set("group.id", unique_name(name))
        .set("enable.auto.commit", "false");
    // The runtime's setting (or the `-X` one), so both sides fetch alike.
    if !kafka.options.iter().any(|(k, _)| k == "fetch.wait.max.ms") {
        config.set("fetch.wait.max.ms", "100");
    }
    let c: BaseConsumer = config.create()?;
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

/// The steady-rate handler: sleeps, optionally writes one row, records the end-to-end
/// latency of measured records (payload `R…`); a ping (`P…`) only says the consumer reads.
struct Steady {
    work: Duration,
    db: Option<sqlx::AnyPool>,
    latencies: Mutex<Vec<i64>>,
    pinged: std::sync::atomic::AtomicBool,
}

impl Steady {
    fn new(work: Duration, db: Option<sqlx::AnyPool>) -> Self {
        Steady {
            work,
            db,
            latencies: Mutex::new(Vec::new()),
            pinged: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn done(&self) -> usize {
        self.latencies.lock().map(|l| l.len()).unwrap_or(0)
    }

    async fn work(&self, key: &str, payload: &[u8], ts: Option<i64>) -> anyhow::Result<()> {
        if payload.first() == Some(&b'P') {
            self.pinged.store(true, Ordering::SeqCst);
            return Ok(());
        }
        tokio::time::sleep(self.work).await;
        if let Some(db) = &self.db {
            sqlx::query(
                "INSERT INTO bench_steady_rows (id, done_ms) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
            )
            .bind(key)
            .bind(now_ms())
            .execute(db)
            .await?;
        }
        let ts = ts.unwrap_or_else(now_ms);
        if let Ok(mut l) = self.latencies.lock() {
            l.push(now_ms() - ts);
        }
        Ok(())
    }
}

impl Handler for Steady {
    type Input = ();

    async fn decode(&self, _record: &Record) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle(&self, record: &Record, (): &()) -> Result<(), HandlerError> {
        let key = record
            .key
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        self.work(
            &key,
            record.payload.as_deref().unwrap_or_default(),
            record.timestamp_ms,
        )
        .await
        .map_err(|e| HandlerError::transient("database", e.to_string()))
    }
}

/// The floor: a bare consumer (assigned every partition, no group) handing each record to
/// `steady` on its own task, at most `workers` at once, until `n` are measured.
fn bare_steady(
    kafka: &KafkaArgs,
    topic: &str,
    partitions: i32,
    n: usize,
    workers: usize,
    steady: Arc<Steady>,
    rt: tokio::runtime::Handle,
) -> anyhow::Result<()> {
    let c = from_beginning(kafka, "bench-floor", topic, partitions)?;
    let slots = Arc::new(tokio::sync::Semaphore::new(workers));
    let start = Instant::now();
    while steady.done() < n {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(600),
            "bare consumer stalled"
        );
        let Some(m) = c.poll(Duration::from_millis(5)) else {
            continue;
        };
        let m = m?;
        let permit = rt.block_on(slots.clone().acquire_owned())?;
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
        let payload = m.payload().unwrap_or_default().to_vec();
        let ts = m.timestamp().to_millis();
        let s = steady.clone();
        rt.spawn(async move {
            if let Err(e) = s.work(&key, &payload, ts).await {
                eprintln!("floor handler: {e}");
            }
            drop(permit);
        });
    }
    Ok(())
}

/// Pings `topic` until `steady` has seen one (the consumer is assigned and fetching), then
/// produces `n` records at `rate`; each send's time to its ack (µs).
async fn ping_then_produce(
    kafka: KafkaArgs,
    topic: String,
    steady: Arc<Steady>,
    n: usize,
    rate: f64,
) -> anyhow::Result<Vec<i64>> {
    let producer = idempotent_producer(&kafka, "bench-steady")?;
    let start = Instant::now();
    while !steady.pinged.load(Ordering::SeqCst) {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the consumer never read a ping"
        );
        producer
            .send(
                FutureRecord::to(&topic).key("ping").payload("P"),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let run = unique_name("r");
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let mut acks = Vec::with_capacity(n);
    for i in 0..n {
        tick.tick().await;
        let (key, payload) = (format!("{run}-{i}"), format!("R{i:08}"));
        let sent = Instant::now();
        let delivery = producer
            .send_result(FutureRecord::to(&topic).key(&key).payload(&payload))
            .map_err(|(e, _)| e)?;
        acks.push(tokio::spawn(async move {
            delivery
                .await
                .map(|r| r.map(|_| sent.elapsed()).map_err(|(e, _)| e))
        }));
    }
    let mut out = Vec::with_capacity(n);
    for a in acks {
        let took = a.await??.context("delivery failed")?;
        out.push(i64::try_from(took.as_micros()).unwrap_or(i64::MAX));
    }
    Ok(out)
}

/// One steady-rate run's figures (ms): end to end p50, p99, max; send → ack p50, p99.
#[derive(Debug, Clone, Copy)]
struct SteadyFigures {
    p50: i64,
    p99: i64,
    max: i64,
    ack_p50: f64,
    ack_p99: f64,
}

/// One steady-rate run.
#[allow(clippy::too_many_arguments)]
async fn steady_run(
    stack: &Stack,
    args: &Args,
    rate: f64,
    runtime: bool,
    db: Option<sqlx::AnyPool>,
) -> anyhow::Result<SteadyFigures> {
    let kafka = stack.kafka();
    // The consumers' (the producer does not take the setting).
    let mut consuming = kafka.clone();
    if let Some(wait) = args.fetch_wait {
        consuming.options.retain(|(k, _)| k != "fetch.wait.max.ms");
        consuming
            .options
            .push(("fetch.wait.max.ms".to_owned(), wait.as_millis().to_string()));
    }
    let topic = stack.topic("bench-steady", args.partitions).await?;
    let n = (rate * args.steady_seconds).round().max(1.0) as usize;
    let steady = Arc::new(Steady::new(Duration::from_millis(args.steady_work_ms), db));
    let producing = tokio::spawn(ping_then_produce(
        kafka.clone(),
        topic.clone(),
        steady.clone(),
        n,
        rate,
    ));
    if runtime {
        let consumer = ConsumerArgs {
            workers: args.steady_workers,
            buffer: args.steady_workers,
            ..ConsumerArgs::default()
        };
        let s = steady.clone();
        docflow_bench::run_runtime(&consuming, &topic, consumer, steady.clone(), move || {
            s.done() >= n
        })
        .await?;
    } else {
        let (k, t, parts, workers, s) = (
            consuming.clone(),
            topic.clone(),
            args.partitions,
            args.steady_workers,
            steady.clone(),
        );
        let rt = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || bare_steady(&k, &t, parts, n, workers, s, rt))
            .await??;
    }
    let mut acks = producing.await??;
    acks.sort_unstable();
    let mut lat = steady
        .latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    lat.sort_unstable();
    #[allow(clippy::cast_precision_loss)]
    let ms = |us: i64| us as f64 / 1000.0;
    Ok(SteadyFigures {
        p50: percentile(&lat, 50.0),
        p99: percentile(&lat, 99.0),
        max: lat.last().copied().unwrap_or(0),
        ack_p50: ms(percentile(&acks, 50.0)),
        ack_p99: ms(percentile(&acks, 99.0)),
    })
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
    if args.steady_only {
        return steady_only(&stack, &args).await;
    }

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
        commit_interval: args.commit_interval,
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

    // 3. Latency at steady rates, against the bare consumer's floor.
    let db = docflow_store::scratch::ScratchDb::from_env().await?;
    let pool = docflow_store::open(&db.url, 16).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS bench_steady_rows (id TEXT PRIMARY KEY, done_ms BIGINT NOT NULL)")
        .execute(&pool)
        .await?;
    let backend = match db.backend() {
        docflow_store::Backend::Sqlite => "SQLite",
        docflow_store::Backend::Postgres => "PostgreSQL",
    };
    let mut steady_rows = Vec::new();
    for with_row in [false, true] {
        for &rate in &args.steady_rates {
            let floor =
                steady_run(&stack, &args, rate, false, with_row.then(|| pool.clone())).await?;
            let ours =
                steady_run(&stack, &args, rate, true, with_row.then(|| pool.clone())).await?;
            println!("steady {rate}/s row {with_row}: floor {floor:?}, runtime {ours:?}");
            steady_rows.push((with_row, rate, floor, ours));
        }
    }
    pool.close().await;
    db.drop_now().await?;

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
    writeln!(
        md,
        "\n## Latency at steady rates: the runtime against a bare consumer\n\n\
         End-to-end, record timestamp (ms) to handler done, of {} s of arrivals at each rate after the consumer reads (a ping first); {} partitions; a {} ms handler (a sleep; with a row: the sleep, then one `INSERT … ON CONFLICT DO NOTHING` into {backend}, 16 connections); both consumers run {} handlers at once and fetch with `fetch.wait.max.ms` {} ms. The floor is a bare librdkafka consumer (assigned every partition, no group) handing each record to the same handler on its own task: no offset bookkeeping, no commits. The runtime: a group member with its watermarks, offset store and prompt commits (`--commit-interval` 100 ms), `--workers {} --buffer {}`. **Send → ack**: the producer's (idempotent, `linger.ms` 1) time from send to the broker's ack, in the floor's run.\n",
        args.steady_seconds,
        args.partitions,
        args.steady_work_ms,
        args.steady_workers,
        fetch_wait_ms(&args),
        args.steady_workers,
        args.steady_workers,
    )?;
    writeln!(
        md,
        "| handler | records/s | send → ack p50 / p99 | floor p50 | runtime p50 | floor p99 | runtime p99 | floor max | runtime max | p50 over the floor | p99 over the floor |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for (with_row, rate, f, r) in &steady_rows {
        writeln!(
            md,
            "| {} | {rate:.0} | {:.1} / {:.1} ms | {} ms | {} ms | {} ms | {} ms | {} ms | {} ms | {:+} ms | {:+} ms |",
            if *with_row {
                format!("{} ms + a {backend} row", args.steady_work_ms)
            } else {
                format!("{} ms sleep", args.steady_work_ms)
            },
            f.ack_p50,
            f.ack_p99,
            f.p50,
            r.p50,
            f.p99,
            r.p99,
            f.max,
            r.max,
            r.p50 - f.p50,
            r.p99 - f.p99,
        )?;
    }
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}

/// `--steady-only`: the steady-rate runs with the sleep handler, printed.
async fn steady_only(stack: &Stack, args: &Args) -> anyhow::Result<()> {
    println!(
        "fetch.wait.max.ms {} ms; rate, then floor and runtime: e2e p50 / p99 / max ms, send → ack p50 / p99 ms",
        fetch_wait_ms(args)
    );
    for &rate in &args.steady_rates {
        let f = steady_run(stack, args, rate, false, None).await?;
        let r = steady_run(stack, args, rate, true, None).await?;
        println!(
            "{rate:>6.0}/s  floor {} / {} / {}  ack {:.1} / {:.1}   runtime {} / {} / {}  ack {:.1} / {:.1}",
            f.p50, f.p99, f.max, f.ack_p50, f.ack_p99, r.p50, r.p99, r.max, r.ack_p50, r.ack_p99
        );
    }
    Ok(())
}

/// The steady runs' `fetch.wait.max.ms`: `--fetch-wait`, else the runtime's 100.
fn fetch_wait_ms(args: &Args) -> u128 {
    args.fetch_wait.map_or(100, |w| w.as_millis())
}
