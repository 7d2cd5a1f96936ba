//! The scale-up path, load-tested: a local autoscaler starts and stops real consumer
//! processes (`docflow-testbed`, the runtime with a fixed-time handler and one worker, so a
//! replica's service rate is known) by KEDA's Kafka trigger, a rate trigger and the HPA's
//! rules (`docflow_autoscale`), against the embedded broker, with an injected cold start. A
//! load generator steps the produce rate up and back down. The run records lag, replicas
//! and every record's end-to-end latency, checks that nothing was lost across scale-out and
//! scale-in, and compares the time outside the waiting-time SLA with what
//! `docflow_autoscale::simulate` predicts for the same parameters and the measured service
//! rate.
//!
//! `make bench` runs it (after building `docflow-testbed`) and writes
//! bench/results/autoscale-local.md and .svg.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use docflow_autoscale::hpa::{Hpa, HpaState, Policy};
use docflow_autoscale::keda::{
    KafkaTrigger, PartitionOffsets, PersistentLagMemory, ResetPolicy, kafka_metric,
};
use docflow_autoscale::plot::{Panel, Series, svg};
use docflow_autoscale::simulate::{self, Scaling, Scenario};
use docflow_stack::{Stack, unique_name};
use sqlx::Row as _;

#[derive(Debug, Parser)]
#[command(about = "Load test of the scale-up path with a local autoscaler")]
struct Args {
    /// Partitions of the topic (the most replicas that can work).
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Handler time per record, ms (one worker per replica: μ ≈ 1000 / this).
    #[arg(long, default_value_t = 40)]
    work_ms: u64,
    /// Produce rate before the step and after it ends, records/s.
    #[arg(long, default_value_t = 80.0)]
    from_rate: f64,
    /// Produce rate during the step, records/s.
    #[arg(long, default_value_t = 200.0)]
    to_rate: f64,
    /// When the step starts, s.
    #[arg(long, default_value_t = 30.0)]
    step_at: f64,
    /// When the rate returns to `from_rate`, s.
    #[arg(long, default_value_t = 330.0)]
    back_at: f64,
    /// Length of the run, s.
    #[arg(long, default_value_t = 480.0)]
    duration: f64,
    /// Injected cold start: from asking for a replica to starting its process, s.
    #[arg(long, default_value_t = 45.0)]
    cold_start: f64,
    /// Replicas at the start (and the floor).
    #[arg(long, default_value_t = 4)]
    replicas: u32,
    /// Waiting-time SLA, s.
    #[arg(long, default_value_t = 0.2)]
    sla_wait: f64,
    /// Seconds between autoscaler syncs (KEDA's pollingInterval, the HPA's sync period).
    #[arg(long, default_value_t = 5.0)]
    sync: f64,
    /// Safe utilisation: the rate trigger's target is μ × this per replica.
    #[arg(long, default_value_t = 0.8)]
    utilisation: f64,
    /// Scale-down stabilisation window, s (compressed from the seed's 600 s).
    #[arg(long, default_value_t = 60)]
    down_window: u32,
    /// Scale-down policy period for 2 pods, s (compressed from the seed's 120 s).
    #[arg(long, default_value_t = 30)]
    down_period: u32,
    /// The replicas' `--commit-interval`; lagThreshold adds its records (`docflow plan`).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    commit_interval: Duration,
    /// Also run the load with 1 s commits and lagThreshold μ × SLA (the runtime's cadence
    /// before prompt commits), and compare replica-seconds.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    compare: bool,
    /// Run the 1 s commits' variant first (the first run starts right after the μ
    /// measurement, its replicas joining while the load arrives).
    #[arg(long)]
    lazy_first: bool,
    /// Markdown report to write (an .svg beside it).
    #[arg(long, default_value = "bench/results/autoscale-local.md")]
    out: std::path::PathBuf,
}

fn testbed(
    stack: &Stack,
    topic: &str,
    group: &str,
    work_ms: u64,
) -> anyhow::Result<tokio::process::Command> {
    let mut c = docflow_bench::testbed_process(stack, work_ms, 1, topic, group)?;
    c.args([
        // Twelve replicas stay within a PostgreSQL server's 100 connections.
        "--database-max-connections",
        "2",
        "--record-latency",
    ]);
    Ok(c)
}

/// Records/s one replica serves, measured: one replica over a backlog.
async fn measure_service_rate(stack: &Stack, args: &Args) -> anyhow::Result<f64> {
    let topic = stack.topic("bench-autoscale-mu", args.partitions).await?;
    let n = 400usize;
    docflow_bench::produce(&stack.kafka(), &topic, n, None, |i| {
        (format!("mu-{i}"), format!("mu-{i}"))
    })
    .await?;
    let group = unique_name("mu");
    let mut child = testbed(stack, &topic, &group, args.work_ms)?.spawn()?;
    let (mut t0, mut c0) = (None, 0);
    let deadline = Instant::now() + Duration::from_secs(120);
    let rate = loop {
        let done = stack.committed(&group, &topic).await?;
        if t0.is_none() && done >= 40 {
            t0 = Some(Instant::now());
            c0 = done;
        }
        if done >= 360 {
            let t = t0.map_or(1.0, |t| t.elapsed().as_secs_f64());
            break (done - c0) as f64 / t;
        }
        anyhow::ensure!(Instant::now() < deadline, "calibration stalled at {done}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    child.kill().await?;
    Ok(rate)
}

fn rate_at(args: &Args, t: f64) -> f64 {
    if t >= args.step_at && t < args.back_at {
        args.to_rate
    } else {
        args.from_rate
    }
}

fn hpa(args: &Args, target: f64) -> Hpa {
    let mut h = Hpa::seed(
        args.replicas,
        u32::try_from(args.partitions).unwrap_or(12),
        target,
    );
    h.down.stabilization_s = args.down_window;
    h.down.policies = vec![Policy::Pods {
        value: 2,
        period_s: args.down_period,
    }];
    h
}

/// SIGTERM: the replica drains, commits and leaves the group; the task ends when it exits.
fn stop(
    mut c: tokio::process::Child,
) -> tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>> {
    if let Some(pid) = c.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    tokio::spawn(async move { c.wait().await })
}

/// One autoscaler sync, as recorded.
#[derive(Debug, Clone, Copy)]
struct Tick {
    t: f64,
    lag: i64,
    requested: u32,
    ready: u32,
}

/// How the replicas commit and what lagThreshold the trigger uses: the run's variable.
#[derive(Debug, Clone)]
struct Variant {
    name: &'static str,
    /// The replicas' `--commit-interval`.
    commit_interval: Duration,
    /// What lagThreshold adds to the SLA wait (`docflow plan` adds the commit interval).
    threshold_adds_commit: bool,
}

/// What one run of the load showed.
struct Outcome {
    lag_threshold: f64,
    ticks: Vec<Tick>,
    events: Vec<(f64, u32, u32)>,
    total: usize,
    rows: i64,
    redelivered: i64,
    outside: f64,
    wait_series: Vec<(f64, f64)>,
    latency: (f64, f64, f64),
}

impl Outcome {
    /// Replica-seconds of processes serving, over [`from`, `to`) of the run (the sync ticks'
    /// step function).
    fn replica_seconds(&self, from: f64, to: f64) -> f64 {
        self.ticks
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0].t.max(from), w[1].t.min(to));
                if b > a {
                    (b - a) * f64::from(w[0].ready)
                } else {
                    0.0
                }
            })
            .sum()
    }

    /// Mean of the trigger's lag over the ticks in [`from`, `to`).
    fn mean_lag(&self, from: f64, to: f64) -> f64 {
        let lags: Vec<f64> = self
            .ticks
            .iter()
            .filter(|t| t.t >= from && t.t < to)
            .map(|t| t.lag as f64)
            .collect();
        lags.iter().sum::<f64>() / (lags.len().max(1) as f64)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let stack = Stack::builder()
        .start()
        .await
        .context("starting the embedded stack")?;
    let database = if stack.database_url.starts_with("postgres") {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    let mu = measure_service_rate(&stack, &args).await?;
    println!("measured service rate: {mu:.1} records/s per replica");
    let prompt = Variant {
        name: "prompt commits",
        commit_interval: args.commit_interval,
        threshold_adds_commit: true,
    };
    let lazy = Variant {
        name: "1 s commits, lagThreshold μ × SLA",
        commit_interval: Duration::from_secs(1),
        threshold_adds_commit: false,
    };
    let swapped = args.lazy_first && args.compare;
    let order = if swapped {
        [&lazy, &prompt]
    } else {
        [&prompt, &lazy]
    };
    let mut runs = Vec::new();
    for v in order.into_iter().take(if args.compare { 2 } else { 1 }) {
        println!("== {}", v.name);
        runs.push(run_load(&stack, &args, mu, v).await?);
    }
    // The prompt commits' run first, whichever ran first.
    if swapped {
        runs.swap(0, 1);
    }
    let o = &runs[0];
    let rate_target = mu * args.utilisation;

    // The same parameters, simulated.
    let scenario = Scenario {
        service_rate: mu,
        sla_wait_s: args.sla_wait,
        cold_start_s: args.cold_start,
        initial_replicas: args.replicas,
        partitions: u32::try_from(args.partitions)?,
        arrivals: vec![
            (0.0, args.from_rate),
            (args.step_at, args.to_rate),
            (args.back_at, args.from_rate),
        ],
        duration_s: args.duration,
        scaling: Scaling::Keda {
            hpa: hpa(&args, o.lag_threshold),
            sync_period_s: args.sync,
            rate_per_replica: Some(rate_target),
        },
    };
    let sim = simulate::run(&scenario);
    let ratio = o.outside / sim.outside_sla_s.max(1.0);
    let ups = o.events.iter().filter(|(_, a, b)| b > a).count();
    // Thrashing: a scale-up after a scale-down while the load is unchanged.
    let thrash = o.events.windows(2).any(|w| {
        w[0].2 < w[0].1
            && w[1].2 > w[1].1
            && (rate_at(&args, w[0].0) - rate_at(&args, w[1].0)).abs() < 1.0
    });
    let last_lag = o.ticks.last().map_or(0, |t| t.lag);

    let mut md = docflow_bench::report_head(
        "Scale-up path, load-tested with a local autoscaler",
        "autoscale-bench",
        &format!(
            "broker: embedded Nisshi (memory storage) on loopback; replicas: docflow-testbed processes ({} ms a record, 1 worker, a {database} row per record); database: {database}",
            args.work_ms
        ),
    );
    let _ = write!(
        md,
        "A local autoscaler syncs every {} s: KEDA's Kafka metric (lagThreshold {:.0} = μ × (SLA {} s + commit interval {} s), as `docflow plan` derives it; earliest, partitions cap) and a rate trigger (the topic's growth, target {rate_target:.1} records/s per replica = μ × {}), the HPA's rules (up: 30 s window, +100 %/60 s; down: {} s window, −2 pods/{} s; min {}, max {}). A replica asked for starts its process after an injected cold start of {} s (then joins the group: a rebalance); the replicas commit at most every {} s (`--commit-interval`). Load: {} → {} records/s at {} s, back to {} at {} s, {} s in all; {} partitions. Measured service rate μ = {mu:.1} records/s per replica (one replica over a 400-record backlog).\n\n",
        args.sync,
        o.lag_threshold,
        args.sla_wait,
        prompt.commit_interval.as_secs_f64(),
        args.utilisation,
        args.down_window,
        args.down_period,
        args.replicas,
        args.partitions,
        args.cold_start,
        prompt.commit_interval.as_secs_f64(),
        args.from_rate,
        args.to_rate,
        args.step_at,
        args.from_rate,
        args.back_at,
        args.duration,
        args.partitions,
    );
    let _ = write!(
        md,
        "| | measured | simulated (same parameters, μ measured) |\n|---|---|---|\n\
         | time outside the SLA (median wait of the records produced in a second > {} s) | {:.0} s | {:.0} s |\n\
         | ratio measured / simulated | {ratio:.2} | |\n\
         | peak replicas | {} | {} |\n\
         | scale-ups | {ups} | {} |\n\
         | thrashing (up again after a down at unchanged load) | {} | |\n\
         | lag at the end of the run | {last_lag} records | |\n\n",
        args.sla_wait,
        o.outside,
        sim.outside_sla_s,
        o.ticks.iter().map(|t| t.requested).max().unwrap_or(0),
        sim.peak_replicas,
        sim.scale_ups,
        if thrash { "yes" } else { "no" },
    );
    let (p50, p99, max) = o.latency;
    let _ = write!(
        md,
        "Records: {} produced, {} recorded by the replicas ({} lost), {} redelivered (at-least-once across the rebalances; each counted once). End-to-end latency over the run: p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms.\n\nScale events (t, from → to): {}\n\n",
        o.total,
        o.rows,
        i64::try_from(o.total)? - o.rows,
        o.redelivered,
        scale_events(&o.events),
    );
    if runs.len() > 1 {
        let _ = write!(
            md,
            "## Prompt commits against librdkafka's 1 s auto-commit cadence\n\n\
             The same load, one run after the other on one stack ({}), μ the same measurement. Kafka's lag, what KEDA reads, counts the records done but not yet committed: with a commit a second and a lagThreshold of μ × SLA, those read as demand. Replica-seconds: processes serving, summed over the run and over the part after the load fell back ({} s on).\n\n\
             | | lagThreshold | trigger's lag at {} records/s before the step (mean) | after the load fell (mean) | replica-seconds | replica-seconds after the load fell | time outside the SLA | scale events |\n|---|---|---|---|---|---|---|---|\n",
            if swapped {
                "the 1 s commits' run first"
            } else {
                "the prompt commits' run first"
            },
            args.back_at,
            args.from_rate,
        );
        for (v, r) in [&prompt, &lazy].iter().zip(&runs) {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} s | {} |",
                v.name,
                r.lag_threshold,
                r.mean_lag(args.sync, args.step_at),
                r.mean_lag(args.back_at + args.sync, args.duration),
                r.replica_seconds(0.0, args.duration),
                r.replica_seconds(args.back_at, args.duration),
                r.outside,
                scale_events(&r.events),
            );
        }
        md.push('\n');
    }
    let svg_path = args.out.with_extension("svg");
    let chart = svg(
        &[
            Panel {
                title: "lag, records".into(),
                series: vec![
                    Series {
                        name: "measured".into(),
                        points: o.ticks.iter().map(|t| (t.t, t.lag as f64)).collect(),
                        dashed: false,
                    },
                    Series {
                        name: "simulated".into(),
                        points: sim.timeline.iter().map(|s| (s.t, s.backlog)).collect(),
                        dashed: true,
                    },
                ],
            },
            Panel {
                title: "replicas asked for".into(),
                series: vec![
                    Series {
                        name: "measured".into(),
                        points: o
                            .ticks
                            .iter()
                            .map(|t| (t.t, f64::from(t.requested)))
                            .collect(),
                        dashed: false,
                    },
                    Series {
                        name: "measured, serving (process started)".into(),
                        points: o.ticks.iter().map(|t| (t.t, f64::from(t.ready))).collect(),
                        dashed: false,
                    },
                    Series {
                        name: "simulated".into(),
                        points: sim
                            .timeline
                            .iter()
                            .map(|s| (s.t, f64::from(s.requested)))
                            .collect(),
                        dashed: true,
                    },
                ],
            },
            Panel {
                title: "median wait of the records produced each second, s".into(),
                series: vec![Series {
                    name: "measured".into(),
                    points: o.wait_series.clone(),
                    dashed: false,
                }],
            },
        ],
        args.duration,
    );
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&svg_path, chart)?;
    let _ = writeln!(
        md,
        "![lag, replicas and wait over time]({})",
        svg_path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    docflow_bench::write_report(&args.out, &md)?;
    print!("{md}");
    for r in &runs {
        anyhow::ensure!(r.rows == i64::try_from(r.total)?, "records were lost");
    }
    stack.stop().await?;
    Ok(())
}

fn scale_events(events: &[(f64, u32, u32)]) -> String {
    events
        .iter()
        .map(|(t, a, b)| format!("{t:.0} s {a}→{b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One run of the load under `v`: the autoscaler, the replicas, what they recorded.
async fn run_load(stack: &Stack, args: &Args, mu: f64, v: &Variant) -> anyhow::Result<Outcome> {
    let lag_threshold = plan_threshold(args, mu, v);
    let rate_target = mu * args.utilisation;
    let topic = stack.topic("bench-autoscale", args.partitions).await?;
    let group = unique_name("autoscaled");
    let pool = docflow_store::open(&stack.database_url, 4).await?;
    // Each run's own ids: the rows of an earlier run are not this run's.
    let prefix = format!("as{}-", unique_name("r"));
    let replica = |stack: &Stack| -> anyhow::Result<tokio::process::Command> {
        let mut c = testbed(stack, &topic, &group, args.work_ms)?;
        c.env(
            "DOCFLOW_COMMIT_INTERVAL",
            format!("{}ms", v.commit_interval.as_millis()),
        );
        Ok(c)
    };

    // The load: paced produce following the step; ids numbered in order.
    let produced = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let load = {
        let (kafka, topic, produced, prefix) = (
            stack.kafka(),
            topic.clone(),
            produced.clone(),
            prefix.clone(),
        );
        let (from, to, step_at, back_at, duration) = (
            args.from_rate,
            args.to_rate,
            args.step_at,
            args.back_at,
            args.duration,
        );
        tokio::spawn(async move {
            let producer =
                docflow_runtime::producer::idempotent_producer(&kafka, "autoscale-load")?;
            let mut pending = Vec::new();
            let mut next = 0.0_f64;
            let mut i = 0usize;
            loop {
                let t = start.elapsed().as_secs_f64();
                if t >= duration {
                    break;
                }
                // Each record's due time follows the rate at that moment.
                while next <= t {
                    let id = format!("{prefix}{i:08}");
                    pending.push(
                        producer
                            .send_result(
                                rdkafka::producer::FutureRecord::to(&topic)
                                    .key(&id)
                                    .payload(&id),
                            )
                            .map_err(|(e, _)| e)?,
                    );
                    i += 1;
                    produced.store(i, Ordering::Relaxed);
                    let r = if next >= step_at && next < back_at {
                        to
                    } else {
                        from
                    };
                    next += 1.0 / r;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            for p in pending {
                p.await?.map_err(|(e, _)| e)?;
            }
            Ok::<usize, anyhow::Error>(i)
        })
    };

    // The autoscaler.
    let mut trigger = KafkaTrigger::new(&group, &topic, lag_threshold as i64);
    trigger.offset_reset_policy = ResetPolicy::Earliest;
    let hpa_lag = hpa(args, lag_threshold);
    let hpa_rate = Hpa {
        target: rate_target,
        ..hpa_lag.clone()
    };
    let mut state = HpaState::default();
    let mut memory = PersistentLagMemory::default();
    let mut running: Vec<tokio::process::Child> = Vec::new();
    let mut starting: Vec<f64> = Vec::new();
    for _ in 0..args.replicas {
        running.push(replica(stack)?.spawn()?);
    }
    let mut ticks: Vec<Tick> = Vec::new();
    let mut events: Vec<(f64, u32, u32)> = Vec::new();
    let mut prev_end: Option<(f64, i64)> = None;
    let mut stopping = Vec::new();
    let mut next_sync = 0.0;
    loop {
        let t = start.elapsed().as_secs_f64();
        if t >= args.duration {
            break;
        }
        // Replicas whose cold start is over start their process.
        let due = starting.iter().filter(|at| **at <= t).count();
        starting.retain(|at| *at > t);
        for _ in 0..due {
            running.push(replica(stack)?.spawn()?);
        }
        if t >= next_sync {
            next_sync += args.sync;
            let offsets = stack.offsets(&group, &topic).await?;
            let end: i64 = offsets.iter().map(|(_, _, h)| h).sum();
            let parts: Vec<PartitionOffsets> = offsets
                .iter()
                .map(|(p, c, h)| PartitionOffsets {
                    partition: *p,
                    committed: *c,
                    latest: *h,
                })
                .collect();
            let m = kafka_metric(
                &trigger,
                &BTreeMap::from([(topic.clone(), parts)]),
                &mut memory,
            );
            // The rate trigger: the topic's growth since the last sync (ingest's upload rate
            // in production, through Prometheus).
            let rate = prev_end.map_or(args.from_rate, |(pt, pe)| (end - pe) as f64 / (t - pt));
            prev_end = Some((t, end));
            let ready = u32::try_from(running.len()).unwrap_or(0);
            let requested = ready + u32::try_from(starting.len()).unwrap_or(0);
            let want = hpa_lag
                .recommend(m.metric as f64, requested)
                .max(hpa_rate.recommend(rate, requested));
            let next = state.decide(&hpa_lag, t, want, requested);
            if next > requested {
                starting.extend((requested..next).map(|_| t + args.cold_start));
                events.push((t, requested, next));
            } else if next < requested {
                let mut drop = requested - next;
                while drop > 0 && starting.pop().is_some() {
                    drop -= 1;
                }
                for _ in 0..drop {
                    if let Some(c) = running.pop() {
                        stopping.push(stop(c));
                    }
                }
                events.push((t, requested, next));
            }
            ticks.push(Tick {
                t,
                lag: m.total_lag,
                requested: next,
                ready: u32::try_from(running.len()).unwrap_or(0),
            });
            println!(
                "t {t:5.0} s  rate {rate:5.0}/s  lag {:6}  replicas {next:2} ({} serving)",
                m.total_lag,
                running.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = load.await??;
    // Drain: everything produced is committed, then the replicas stop.
    let deadline = Instant::now() + Duration::from_secs(300);
    while stack.committed(&group, &topic).await? < i64::try_from(total)? {
        anyhow::ensure!(Instant::now() < deadline, "the group did not catch up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stopping.extend(running.into_iter().map(stop));
    for s in stopping {
        let _ = s.await;
    }

    // What the replicas recorded.
    let like = format!("{prefix}%");
    let rows: i64 = sqlx::query("SELECT COUNT(*) FROM testbed_rows WHERE msg_id LIKE $1")
        .bind(&like)
        .fetch_one(&pool)
        .await?
        .try_get(0)?;
    let redelivered: i64 = sqlx::query(
        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM testbed_redeliveries WHERE msg_id LIKE $1",
    )
    .bind(&like)
    .fetch_one(&pool)
    .await?
    .try_get(0)?;
    let lat = sqlx::query("SELECT produced_ms, done_ms FROM testbed_latency WHERE msg_id LIKE $1")
        .bind(&like)
        .fetch_all(&pool)
        .await?;
    let t0_ms = lat
        .iter()
        .map(|r| r.try_get::<i64, _>(0).unwrap_or(i64::MAX))
        .min()
        .unwrap_or(0);
    // Per second of produce time: the median wait (end to end minus the work).
    let mut by_second: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    for r in &lat {
        let (p, d): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
        let e2e = (d - p) as f64;
        all.push(e2e);
        by_second
            .entry((p - t0_ms) / 1000)
            .or_default()
            .push((e2e - args.work_ms as f64).max(0.0) / 1000.0);
    }
    let mut outside = 0.0;
    let mut wait_series = Vec::new();
    for (s, waits) in &mut by_second {
        waits.sort_by(f64::total_cmp);
        let median = waits[waits.len() / 2];
        wait_series.push((*s as f64, median));
        if median > args.sla_wait {
            outside += 1.0;
        }
    }
    pool.close().await;
    Ok(Outcome {
        lag_threshold,
        ticks,
        events,
        total,
        rows,
        redelivered,
        outside,
        wait_series,
        latency: docflow_bench::percentiles(all),
    })
}

/// lagThreshold as `docflow plan` derives it for `v`: μ × (SLA wait + commit interval), or
/// μ × SLA wait alone (what it was before the commit interval was counted).
fn plan_threshold(args: &Args, mu: f64, v: &Variant) -> f64 {
    let commit = if v.threshold_adds_commit {
        v.commit_interval.as_secs_f64()
    } else {
        0.0
    };
    (mu * (args.sla_wait + commit)).round().max(1.0)
}
