//! What crash-loop quarantine costs after a death: a replica holding eight records is killed
//! (`kill -9` of its supervisor, as a node loss would), and the next replica runs the records
//! the dead one held — the suspects — one at a time before anything else. The same backlog is
//! drained with no death, after a death with quarantine on (`--max-crash-deliveries 3`, the
//! default), and after a death with crash counting off (`--max-crash-deliveries 0`): the
//! difference between the last two is the quarantine's cost.
//!
//! `make bench` runs it (after building `docflow-testbed`) and writes
//! `bench/results/quarantine.md`.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use docflow_stack::{Stack, unique_name};

#[derive(Debug, Parser)]
struct Args {
    /// Report to write.
    #[arg(long, default_value = "bench/results/quarantine.md")]
    out: std::path::PathBuf,
    /// Records in the backlog.
    #[arg(long, default_value_t = 96)]
    records: usize,
    /// Handler time of a record, milliseconds.
    #[arg(long, default_value_t = 250)]
    work_ms: u64,
    /// Workers of a replica.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Runs of each case (the report shows the median).
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// One drain of a fresh backlog: the seconds the (last) replica took, and the suspects it ran.
struct Drain {
    secs: f64,
    suspects: i64,
}

fn spawn(
    stack: &Stack,
    args: &Args,
    topic: &str,
    group: &str,
    max_crash: u32,
) -> anyhow::Result<tokio::process::Child> {
    Ok(
        docflow_bench::testbed_process(stack, args.work_ms, args.workers, topic, group)?
            .args([
                "--buffer",
                "0",
                "--max-crash-deliveries",
                &max_crash.to_string(),
                // Static membership: the next replica takes the dead one's partitions at
                // once, so the drain measures the work, not the group's session timeout.
                "--group-instance-id",
                &format!("{group}-replica"),
            ])
            .spawn()?,
    )
}

async fn wait_committed(stack: &Stack, group: &str, topic: &str, n: i64) -> anyhow::Result<()> {
    let start = Instant::now();
    while stack.committed(group, topic).await? < n {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "stalled before {n} records"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Drains a fresh backlog; with `kill` the first replica is killed once a quarter is done
/// (its workers full) and the time is the second replica's, from its start.
async fn drain(
    stack: &Stack,
    pool: &sqlx::AnyPool,
    args: &Args,
    kill: Option<u32>,
) -> anyhow::Result<Drain> {
    let topic = stack.topic("bench-quarantine", 4).await?;
    let group = unique_name("quarantine");
    let key = topic.clone();
    docflow_bench::produce(&stack.kafka(), &topic, args.records, None, move |i| {
        let id = format!("{key}-{i:06}");
        (id.clone(), id)
    })
    .await?;
    let n = i64::try_from(args.records)?;
    let max_crash = kill.unwrap_or(3);
    if kill.is_some() {
        let mut first = spawn(stack, args, &topic, &group, max_crash)?;
        wait_committed(stack, &group, &topic, n / 4).await?;
        first.kill().await?;
        // The replica ends itself once its supervisor is gone.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let start = Instant::now();
    let mut child = spawn(stack, args, &topic, &group, max_crash)?;
    wait_committed(stack, &group, &topic, n).await?;
    let secs = start.elapsed().as_secs_f64();
    child.kill().await?;
    let suspects: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT off * 16 + part) FROM delivery_deaths WHERE consumer_group = $1",
    )
    .bind(&group)
    .fetch_one(pool)
    .await?;
    Ok(Drain { secs, suspects })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stack = Stack::builder()
        .sqlite()
        .start()
        .await
        .context("starting the embedded stack")?;
    let pool = docflow_store::connect(&stack.database_url, 2).await?;
    // (label, kill: Some(--max-crash-deliveries) for the death cases)
    let cases: [(&str, Option<u32>); 3] = [
        ("no death", None),
        (
            "after a death, quarantine on (`--max-crash-deliveries 3`)",
            Some(3),
        ),
        (
            "after a death, crash counting off (`--max-crash-deliveries 0`)",
            Some(0),
        ),
    ];
    let mut results = Vec::new();
    for (label, kill) in cases {
        let mut secs = Vec::new();
        let mut suspects = Vec::new();
        for _ in 0..args.runs.max(1) {
            let d = drain(&stack, &pool, &args, kill).await?;
            println!("{label}: {:.2} s, {} suspects", d.secs, d.suspects);
            secs.push(d.secs);
            suspects.push(d.suspects);
        }
        results.push((label, median(secs), suspects));
    }
    let mut md = docflow_bench::report_head(
        "Crash-loop quarantine: what a death costs in throughput",
        "quarantine-bench",
        &format!(
            "embedded Nisshi broker and SQLite; docflow-testbed replicas (each a supervisor and its replica), {} ms a record, {} workers, no buffer, 4 partitions",
            args.work_ms, args.workers
        ),
    );
    md.push_str(&format!(
        "A backlog of {} records is drained by one replica. In the death cases a first replica is killed with `kill -9` (its supervisor; the replica ends itself) once a quarter of the backlog is committed, with its workers full; the time is the next replica's, from its start to the last commit, so it holds three quarters of the backlog plus the records redelivered. Median of {} runs each.\n\n| case | drain | records found in hand of the dead replica (suspects) |\n|---|---|---|\n",
        args.records,
        args.runs.max(1)
    ));
    for (i, (label, secs, suspects)) in results.iter().enumerate() {
        // Without crash counting nothing is recorded, and no record runs alone.
        let suspects = if i == 2 {
            "— (none run alone)".to_owned()
        } else {
            suspects
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        md.push_str(&format!("| {label} | {secs:.2} s | {suspects} |\n"));
    }
    let on = results[1].1;
    let off = results[2].1;
    let work = args.work_ms as f64 / 1000.0;
    md.push_str(&format!(
        "\nThe quarantine's cost after this death: **{:.2} s** of drain time ({on:.2} s against {off:.2} s). Each suspect runs alone: it waits for the records in flight, and nothing starts beside it, so k suspects take about k × {work:.2} s instead of k / {} × {work:.2} s; a death with {} records in hand costs about {:.1} s of one replica's throughput, once, and nothing when no process dies.\n",
        on - off,
        args.workers,
        args.workers,
        args.workers as f64 * work * (1.0 - 1.0 / args.workers as f64),
    ));
    docflow_bench::write_report(&args.out, &md)?;
    pool.close().await;
    stack.stop().await?;
    Ok(())
}
