//! Replay benchmarks on the embedded broker, with the testbed consumer as the stage (a real
//! process: 5 ms of handler time and one database row per record, 8 workers).
//!
//! 1. Rate: the live group working through a backlog from its start, versus
//!    `docflow replay run --mode side` (the same binary with `--assign-range`) over the same
//!    records, unthrottled. Both times run from the process start to the last record done.
//! 2. Live latency: records arriving at a fixed rate for a live replica in this process
//!    (the same 5 ms handler, end-to-end p50/p99 from the record's timestamp), alone and
//!    with a side replay of a large backlog at `--max-rate` beside it.
//!
//! `make bench` runs it (after building `docflow-testbed`) and writes
//! `bench/results/replay.md`.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use docflow_bench::produce;
use docflow_config::ConsumerArgs;
use docflow_replay::{Output, PlanArgs, SideRun, TargetArgs, side};
use docflow_runtime::metrics::now_ms;
use docflow_runtime::{ConsumerMetrics, ConsumerSpec, Handler, HandlerError, Health, Record};
use docflow_stack::{Stack, unique_name};

#[derive(Debug, Parser)]
struct Args {
    /// Backlog records for the rate comparison.
    #[arg(long, default_value_t = 3_000)]
    records: usize,
    /// Partitions of the benchmark topics.
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    /// Live arrival rate in the latency runs, records/s.
    #[arg(long, default_value_t = 100.0)]
    live_rate: f64,
    /// Live records per latency run.
    #[arg(long, default_value_t = 1_500)]
    live_records: usize,
    /// `--max-rate` of the side replay in the latency run, records/s.
    #[arg(long, default_value_t = 100.0)]
    max_rate: f64,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/replay.md")]
    out: std::path::PathBuf,
}

const WORK_MS: u64 = 5;
const WORKERS: usize = 8;

/// Record `i` of `topic`: key and payload `<topic>-<i>`, an id unique across topics (the
/// testbed keys its rows by it).
fn id_of(topic: &str) -> impl Fn(usize) -> (String, String) + use<> {
    let topic = topic.to_owned();
    move |i| {
        let id = format!("{topic}-{i:07}");
        (id.clone(), id)
    }
}

fn testbed_command(stack: &Stack) -> anyhow::Result<Vec<String>> {
    docflow_bench::testbed_command(stack, WORK_MS, WORKERS)
}

fn plan_args(stack: &Stack, group: &str, topic: &str) -> PlanArgs {
    PlanArgs {
        group: group.to_owned(),
        topic: topic.to_owned(),
        target: TargetArgs {
            from_offset: None,
            from_timestamp: None,
            by_duration: None,
            shift_by: None,
            to_earliest: true,
            to_latest: false,
            from_file: None,
        },
        partition: Vec::new(),
        to_offset: None,
        rate: None,
        metrics_url: Vec::new(),
        sample: Duration::from_secs(10),
        output: Output::Table,
        kafka: stack.kafka(),
    }
}

/// The live group over the backlog: a testbed process from start to the last commit.
async fn live_rate(stack: &Stack, topic: &str, n: usize) -> anyhow::Result<Duration> {
    let group = unique_name("live");
    let start = Instant::now();
    let mut child =
        docflow_bench::testbed_process(stack, WORK_MS, WORKERS, topic, &group)?.spawn()?;
    loop {
        let done = stack.committed(&group, topic).await?;
        if done >= i64::try_from(n)? {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "live run stalled at {done}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = start.elapsed();
    child.kill().await?;
    Ok(took)
}

/// Records end-to-end latency after the same synthetic work as the testbed.
#[derive(Default)]
struct Timed {
    latencies: Mutex<Vec<i64>>,
}

impl Handler for Timed {
    type Input = ();

    async fn decode(&self, _record: &Record) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle(&self, record: &Record, (): &()) -> Result<(), HandlerError> {
        tokio::time::sleep(Duration::from_millis(WORK_MS)).await;
        let ts = record.timestamp_ms.unwrap_or_else(now_ms);
        if let Ok(mut l) = self.latencies.lock() {
            l.push(now_ms() - ts);
        }
        Ok(())
    }
}

/// p50 and p99 (ms) of the live group's end-to-end latency at `rate`, with `beside` running.
async fn live_latency(
    stack: &Stack,
    partitions: i32,
    n: usize,
    rate: f64,
    beside: Option<(&docflow_replay::Plan, &SideRun, &[side::Range])>,
) -> anyhow::Result<(i64, i64, Option<side::SideSummary>)> {
    let topic = stack.topic("bench-replay-live", partitions).await?;
    let timed = Arc::new(Timed::default());
    let spec = ConsumerSpec::new(unique_name("live-latency"), vec![topic.clone()]);
    let consumer = ConsumerArgs {
        workers: WORKERS,
        buffer: WORKERS,
        ..ConsumerArgs::default()
    };
    let metrics = ConsumerMetrics::new(&prometheus::Registry::new())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (k, h) = (stack.kafka(), timed.clone());
    let live = tokio::spawn(async move {
        docflow_runtime::run(
            &k,
            &consumer,
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
    // Warm-up: the live replica has joined and handled a record before the clock starts,
    // and the side replica is running (2 s after its start).
    produce(&stack.kafka(), &topic, 1, None, id_of(&topic)).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while timed.latencies.lock().map(|l| l.is_empty()).unwrap_or(true) {
        anyhow::ensure!(Instant::now() < deadline, "live replica never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let side_run = beside.map(|(plan, run, ranges)| {
        let (kafka, plan, run, ranges) =
            (stack.kafka(), plan.clone(), run.clone(), ranges.to_vec());
        tokio::spawn(async move { side::run_side(&kafka, &plan, &run, &ranges).await })
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    if let Ok(mut l) = timed.latencies.lock() {
        l.clear();
    }
    produce(&stack.kafka(), &topic, n, Some(rate), id_of(&topic)).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while timed.latencies.lock().map(|l| l.len()).unwrap_or(0) < n {
        anyhow::ensure!(Instant::now() < deadline, "live group stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let summary = match side_run {
        Some(task) => {
            task.abort();
            match task.await {
                Ok(Ok(s)) => Some(s),
                _ => None,
            }
        }
        None => None,
    };
    let _ = stop.send(());
    live.await??;
    let mut lat = timed
        .latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    lat.sort_unstable();
    let at = |p: f64| lat[((p / 100.0) * (lat.len() as f64 - 1.0)).round() as usize];
    Ok((at(50.0), at(99.0), summary))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stack = Stack::builder()
        .sqlite()
        .start()
        .await
        .context("starting the embedded stack")?;
    let state = std::env::temp_dir().join(unique_name("bench-replay-state"));

    // 1. Rates over the same backlog.
    let backlog = stack.topic("bench-replay-backlog", args.partitions).await?;
    produce(
        &stack.kafka(),
        &backlog,
        args.records,
        None,
        id_of(&backlog),
    )
    .await?;
    let live = live_rate(&stack, &backlog, args.records).await?;
    let live_rate = args.records as f64 / live.as_secs_f64();
    println!("live: {live_rate:.0} records/s");
    let plan = docflow_replay::plan(plan_args(&stack, &unique_name("stage"), &backlog)).await?;
    let run = SideRun {
        id: "rate".into(),
        state_dir: state.clone(),
        max_rate: 0.0,
        command: testbed_command(&stack)?
            .into_iter()
            .chain(["--topic".to_owned(), backlog.clone()])
            .collect(),
        progress_bar: false,
        log: None,
    };
    let (ranges, _) = side::ranges_for(&plan, &run, true)?;
    let summary = side::run_side(&stack.kafka(), &plan, &run, &ranges).await?;
    let replay_rate = summary.records as f64 / summary.took.as_secs_f64();
    println!("side replay: {replay_rate:.0} records/s ({summary})");

    // 2. Live latency, alone and beside a throttled side replay of a larger backlog.
    let (alone50, alone99, _) = live_latency(
        &stack,
        args.partitions,
        args.live_records,
        args.live_rate,
        None,
    )
    .await?;
    println!("live alone: p50 {alone50} ms, p99 {alone99} ms");
    let big = stack.topic("bench-replay-big", args.partitions).await?;
    produce(&stack.kafka(), &big, args.records * 4, None, id_of(&big)).await?;
    let big_plan = docflow_replay::plan(plan_args(&stack, &unique_name("stage"), &big)).await?;
    let throttled = SideRun {
        id: "throttled".into(),
        state_dir: state.clone(),
        max_rate: args.max_rate,
        command: testbed_command(&stack)?
            .into_iter()
            .chain(["--topic".to_owned(), big.clone()])
            .collect(),
        progress_bar: false,
        log: None,
    };
    let (big_ranges, _) = side::ranges_for(&big_plan, &throttled, true)?;
    let (beside50, beside99, _) = live_latency(
        &stack,
        args.partitions,
        args.live_records,
        args.live_rate,
        Some((&big_plan, &throttled, &big_ranges)),
    )
    .await?;
    println!(
        "live beside a side replay at {}/s: p50 {beside50} ms, p99 {beside99} ms",
        args.max_rate
    );
    let _ = std::fs::remove_dir_all(&state);

    let mut md = docflow_bench::report_head(
        "Replay benchmarks",
        "replay-bench",
        "broker: embedded Nisshi (memory storage) on loopback; stage: docflow-testbed (5 ms a record, one SQLite row, 8 workers)",
    );
    writeln!(
        md,
        "## Rate over the same {} records, {} partitions\n",
        args.records, args.partitions
    )?;
    writeln!(
        md,
        "From the process start to the last record done (the live group joins its group; the side replica assigns its ranges).\n"
    )?;
    writeln!(md, "| consumer | time | records/s |\n|---|---|---|")?;
    writeln!(
        md,
        "| live group from its start | {:.2} s | {live_rate:.0} |",
        live.as_secs_f64()
    )?;
    writeln!(
        md,
        "| `replay run --mode side`, unthrottled | {:.2} s | {replay_rate:.0} |",
        summary.took.as_secs_f64()
    )?;
    writeln!(
        md,
        "\nReplay / live: **{:.2}** (goal ≥ 0.9)\n",
        replay_rate / live_rate
    )?;
    writeln!(
        md,
        "## Live latency, {} records at {}/s, end to end (record timestamp to handler done)\n",
        args.live_records, args.live_rate
    )?;
    writeln!(md, "| beside the live group | p50 | p99 |\n|---|---|---|")?;
    writeln!(md, "| nothing | {alone50} ms | {alone99} ms |")?;
    writeln!(
        md,
        "| a side replay of {} records at `--max-rate {}` | {beside50} ms | {beside99} ms |",
        args.records * 4,
        args.max_rate
    )?;
    writeln!(
        md,
        "\nLive p99 with / without: **{:.2}** (goal ≤ 1.2)",
        beside99 as f64 / alone99.max(1) as f64
    )?;
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}
