//! Analytics rollup throughput on the embedded broker: `doc.uploaded` events/s the rollup
//! counts (exactly once: offsets and counts in one transaction) on SQLite and on PostgreSQL
//! (when `DATABASE_URL` is set), with batching on (`--batch-max 500`) and off
//! (`--batch-max 1`: one transaction per record), as a ratio to the runtime's no-op handler
//! over the same records on the same broker.
//!
//! Each run gets its own topic (same records), group and tenant; the time is from the
//! service's start to the last count committed (group join included, as for the no-op run).
//!
//! `make bench` runs it and writes `bench/results/analytics.md`.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use docflow_config::{ConsumerArgs, KafkaArgs};
use docflow_events::{DocUploaded, EventCodec};
use docflow_runtime::producer::idempotent_producer;
use docflow_stack::{Stack, unique_name};
use docflow_store::Backend;
use docflow_store::scratch::ScratchDb;
use rdkafka::producer::FutureRecord;

#[derive(Debug, Parser)]
struct Args {
    /// Events per batched run (and the no-op run).
    #[arg(long, default_value_t = 50_000)]
    records: usize,
    /// Events per unbatched run (one transaction each: slow by design).
    #[arg(long, default_value_t = 5_000)]
    unbatched_records: usize,
    /// Partitions of the benchmark topics.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// The rollup's (and the no-op's) `--workers`: the records in flight, which is how large
    /// a batch can grow.
    #[arg(long, default_value_t = docflow_analytics_rollup::DEFAULT_WORKERS)]
    workers: usize,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/analytics.md")]
    out: std::path::PathBuf,
}

/// `n` Avro `doc.uploaded` events of `tenant` on a new topic; returns the topic.
async fn topic_with_events(
    stack: &Stack,
    codec: &EventCodec,
    partitions: i32,
    tenant: &str,
    n: usize,
) -> anyhow::Result<String> {
    let topic = stack.topic("bench-analytics", partitions).await?;
    let producer = idempotent_producer(&stack.kafka(), "bench-analytics")?;
    let mut pending = Vec::with_capacity(n);
    for i in 0..n {
        let e = DocUploaded {
            document_id: format!("{i:064x}"),
            tenant_id: tenant.to_owned(),
            object_uri: format!("{tenant}/uploads/{i}"),
            content_type: ["application/pdf", "image/png", "image/jpeg"][i % 3].to_owned(),
            size_bytes: 1_000 + i as i64,
            original_file_name: None,
            uploaded_at: 1_796_083_200_000 + (i as i64 % 72) * 3_600_000,
            producer_version: "bench".into(),
        };
        let value = codec.encode(&e).await?;
        pending.push(
            producer
                .send_result(FutureRecord::to(&topic).key(&e.document_id).payload(&value))
                .map_err(|(e, _)| e)?,
        );
    }
    for p in pending {
        p.await?.map_err(|(e, _)| e)?;
    }
    Ok(topic)
}

async fn noop_run(
    kafka: &KafkaArgs,
    topic: &str,
    n: usize,
    workers: usize,
) -> anyhow::Result<Duration> {
    let noop = Arc::new(docflow_bench::Noop::default());
    let consumer = ConsumerArgs {
        workers,
        ..ConsumerArgs::default()
    };
    let h = noop.clone();
    docflow_bench::run_runtime(kafka, topic, consumer, noop, move || {
        h.done.load(Ordering::Relaxed) >= n
    })
    .await
}

/// One rollup run in process: the time until all `n` events of `tenant` are counted.
async fn rollup_run(
    stack: &Stack,
    database_url: &str,
    topic: &str,
    tenant: &str,
    n: usize,
    batch_max: usize,
    workers: usize,
) -> anyhow::Result<Duration> {
    let group = unique_name("bench-rollup");
    let config = docflow_analytics_rollup::Config::from_args([
        "docflow-analytics-rollup",
        "--kafka-bootstrap-servers",
        &stack.broker.bootstrap_servers(),
        "--schema-registry-url",
        &stack.registry.url(),
        "--database-url",
        database_url,
        "--topic",
        topic,
        "--processed-topic",
        &stack.topics.processed,
        "--group",
        &group,
        "--metrics-listen",
        "127.0.0.1:0",
        "--batch-max",
        &batch_max.to_string(),
        "--workers",
        &workers.to_string(),
    ])?;
    let pool = docflow_store::open(database_url, 2).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let start = Instant::now();
    let task = tokio::spawn(docflow_analytics_rollup::run_until(config, async {
        let _ = stopped.await;
    }));
    let n = i64::try_from(n)?;
    loop {
        let counted: i64 = sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(documents), 0) AS BIGINT) FROM analytics_uploads WHERE tenant_id = $1",
        )
        .bind(tenant)
        .fetch_one(&pool)
        .await?;
        if counted >= n {
            anyhow::ensure!(counted == n, "counted {counted} of {n}: not exact");
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(900) && !task.is_finished(),
            "rollup stalled at {counted} of {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = start.elapsed();
    let _ = stop.send(());
    task.await??;
    pool.close().await;
    Ok(took)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stack = Stack::builder()
        .sqlite()
        .start()
        .await
        .context("starting the embedded stack")?;
    let codec = EventCodec::from_url(&stack.registry.url(), Duration::from_secs(10))?;

    let noop_topic =
        topic_with_events(&stack, &codec, args.partitions, "noop", args.records).await?;
    let noop = noop_run(&stack.kafka(), &noop_topic, args.records, args.workers).await?;
    let noop_rate = args.records as f64 / noop.as_secs_f64();
    println!("no-op: {noop_rate:.0} events/s");

    let mut backends = vec![ScratchDb::sqlite()?];
    if std::env::var("DATABASE_URL").is_ok() {
        backends.push(ScratchDb::from_env().await?);
    }
    let mut rows = Vec::new();
    for db in backends {
        let backend = match db.backend() {
            Backend::Sqlite => "SQLite (file, WAL, synchronous FULL)",
            Backend::Postgres => "PostgreSQL 15 (local, default settings)",
        };
        for (batch_max, n) in [(500, args.records), (1, args.unbatched_records)] {
            let tenant = unique_name("bench-tenant");
            let topic = topic_with_events(&stack, &codec, args.partitions, &tenant, n).await?;
            let took =
                rollup_run(&stack, &db.url, &topic, &tenant, n, batch_max, args.workers).await?;
            let rate = n as f64 / took.as_secs_f64();
            println!("{backend}, batch max {batch_max}: {rate:.0} events/s over {n}");
            rows.push((backend, batch_max, n, took, rate));
        }
        db.drop_now().await?;
    }

    let mut md = docflow_bench::report_head(
        "Analytics rollup throughput",
        "analytics-bench",
        "broker: embedded Nisshi (memory storage) on loopback; database on this machine's disk",
    );
    writeln!(
        md,
        "Events/s counted exactly once (each batch of counts and its offsets in one transaction), \
         from the service's start to the last count committed, {} partitions, {} workers. \
         The no-op handler under the same runtime reads the same kind of records.\n",
        args.partitions, args.workers
    )?;
    writeln!(
        md,
        "| consumer | batching | events | time | events/s | / no-op |\n|---|---|---|---|---|---|"
    )?;
    writeln!(
        md,
        "| runtime, no-op handler | – | {} | {:.2} s | {noop_rate:.0} | 1.00 |",
        args.records,
        noop.as_secs_f64()
    )?;
    for (backend, batch_max, n, took, rate) in &rows {
        let batching = if *batch_max == 1 {
            "off (1 per transaction)".to_owned()
        } else {
            format!("on (up to {batch_max})")
        };
        writeln!(
            md,
            "| rollup, {backend} | {batching} | {n} | {:.2} s | {rate:.0} | {:.2} |",
            took.as_secs_f64(),
            rate / noop_rate
        )?;
    }
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}
