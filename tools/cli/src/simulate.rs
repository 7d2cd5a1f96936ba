//! `docflow simulate`: the scale-up path for a rate step, by the seed's arithmetic (one
//! decision at the step) and by KEDA + HPA rules with and without a rate trigger — time
//! outside the SLA, backlog, replicas and their cost.

use std::fmt::Write as _;

use clap::Args;
use docflow_autoscale::hpa::Hpa;
use docflow_autoscale::plot::{Panel, Series, svg};
use docflow_autoscale::queueing::replicas_for;
use docflow_autoscale::simulate::{Outcome, Scaling, Scenario, run};

/// Arguments of `docflow simulate` (defaults: the seed's step).
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// Records/s one replica serves (μ, 1 / p50 service time).
    #[arg(long, default_value_t = 25.0)]
    service_rate: f64,
    /// Waiting-time SLA, seconds.
    #[arg(long, default_value_t = 0.2)]
    sla_wait: f64,
    /// Seconds from asking for a replica to it serving.
    #[arg(long, default_value_t = 227.0)]
    cold_start: f64,
    /// Arrival rate before the step, records/s.
    #[arg(long, default_value_t = 80.0)]
    from_rate: f64,
    /// Arrival rate after the step (at 60 s), records/s.
    #[arg(long, default_value_t = 200.0)]
    to_rate: f64,
    /// Partitions (the most replicas that can work).
    #[arg(long, default_value_t = 12)]
    partitions: u32,
    /// KEDA lagThreshold (records per replica; Little's law: μ × SLA wait).
    #[arg(long)]
    lag_threshold: Option<f64>,
    /// Safe utilisation for the rate trigger's target (records/s per replica = μ × this).
    #[arg(long, default_value_t = 0.8)]
    utilisation: f64,
    /// Replicas the oracle asks for at the step (the seed's 12).
    #[arg(long, default_value_t = 12)]
    oracle_replicas: u32,
    /// Cost of a replica, per hour.
    #[arg(long, default_value_t = 1.006)]
    replica_cost_per_hour: f64,
    /// What a warm (pre-initialised, stopped) node costs, as a fraction of a running
    /// replica: stopped instances in a warm pool pay for their disks only.
    #[arg(long, default_value_t = 0.1)]
    warm_node_cost: f64,
    /// Simulated time, seconds.
    #[arg(long, default_value_t = 1_800.0)]
    duration: f64,
    /// Also write the table as Markdown here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub(crate) fn run_simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let lag_threshold = args
        .lag_threshold
        .unwrap_or((args.service_rate * args.sla_wait).max(1.0));
    let floor =
        replicas_for(args.from_rate, args.service_rate, args.sla_wait).ok_or_else(|| {
            anyhow::anyhow!(
                "no replica count keeps {} records/s within the SLA",
                args.from_rate
            )
        })?;
    let scenario = |scaling| Scenario {
        service_rate: args.service_rate,
        sla_wait_s: args.sla_wait,
        cold_start_s: args.cold_start,
        initial_replicas: floor,
        partitions: args.partitions,
        arrivals: vec![(0.0, args.from_rate), (60.0, args.to_rate)],
        duration_s: args.duration,
        scaling,
    };
    let keda = |rate| Scaling::Keda {
        hpa: Hpa::seed(floor, args.partitions, lag_threshold),
        sync_period_s: 15.0,
        rate_per_replica: rate,
    };
    let rows: Vec<(String, Outcome)> = vec![
        (
            format!("oracle: {} replicas at the step", args.oracle_replicas),
            run(&scenario(Scaling::Oracle {
                replicas: args.oracle_replicas,
            })),
        ),
        (
            "KEDA lag trigger only".to_owned(),
            run(&scenario(keda(None))),
        ),
        (
            format!(
                "KEDA lag + rate trigger ({:.0} records/s per replica)",
                args.service_rate * args.utilisation
            ),
            run(&scenario(keda(Some(args.service_rate * args.utilisation)))),
        ),
        ("no scaling".to_owned(), run(&scenario(Scaling::Fixed))),
    ];
    let mut md = format!(
        "{} → {} records/s at 60 s; μ {} records/s per replica; SLA wait {} s; cold start {} s; \
         {} partitions; start and min replicas {floor} (M/M/c at {} records/s); lagThreshold {lag_threshold}; \
         HPA up 30 s window +100 %/60 s, down 600 s window −2 pods/120 s; {} s simulated.\n\n",
        args.from_rate,
        args.to_rate,
        args.service_rate,
        args.sla_wait,
        args.cold_start,
        args.partitions,
        args.from_rate,
        args.duration
    );
    md.push_str("| scaling | outside SLA | peak backlog | peak replicas | scale-ups | cost |\n|---|---|---|---|---|---|\n");
    for (name, o) in &rows {
        let _ = writeln!(
            md,
            "| {name} | {:.0} s ({:.1} min) | {:.0} | {} | {} | {:.2} |",
            o.outside_sla_s,
            o.outside_sla_s / 60.0,
            o.peak_backlog,
            o.peak_replicas,
            o.scale_ups,
            o.replica_seconds / 3600.0 * args.replica_cost_per_hour
        );
    }
    // What each mitigation buys, on top of the lag + rate triggers (the seed's figures:
    // weights baked into the image save 40 s of the cold start, a warm node pool 122 s).
    let rate = args.service_rate * args.utilisation;
    let mitigation = |cold: f64, overshoot: f64, down_window: u32, floor_n: u32| {
        let mut hpa = Hpa::seed(floor_n, args.partitions, lag_threshold / overshoot);
        hpa.down.stabilization_s = down_window;
        run(&Scenario {
            cold_start_s: cold.max(0.0),
            initial_replicas: floor_n,
            ..scenario(Scaling::Keda {
                hpa,
                sync_period_s: 15.0,
                rate_per_replica: Some(rate / overshoot),
            })
        })
    };
    let day = |replicas: f64| replicas * 24.0 * args.replica_cost_per_hour;
    let warm_pool = f64::from(args.oracle_replicas.saturating_sub(floor)) * args.warm_node_cost;
    let c = args.cold_start;
    let rows2: Vec<(String, f64, Outcome)> = vec![
        (
            "lag + rate triggers (as above)".into(),
            0.0,
            mitigation(c, 1.0, 600, floor),
        ),
        (
            "scale-in window 300 s (Kubernetes' default) instead of 600 s".into(),
            0.0,
            mitigation(c, 1.0, 300, floor),
        ),
        (
            format!(
                "weights baked into the image (cold start {:.0} s)",
                c - 40.0
            ),
            0.0,
            mitigation(c - 40.0, 1.0, 600, floor),
        ),
        (
            format!("+ warm node pool (cold start {:.0} s)", c - 162.0),
            day(warm_pool),
            mitigation(c - 162.0, 1.0, 600, floor),
        ),
        (
            format!("+ overshoot × 1.25 (cold start {:.0} s)", c - 162.0),
            day(warm_pool),
            mitigation(c - 162.0, 1.25, 600, floor),
        ),
        (
            format!("+ overshoot × 1.5 (cold start {:.0} s)", c - 162.0),
            day(warm_pool),
            mitigation(c - 162.0, 1.5, 600, floor),
        ),
        (
            format!("+ overshoot × 2 (cold start {:.0} s)", c - 162.0),
            day(warm_pool),
            mitigation(c - 162.0, 2.0, 600, floor),
        ),
        (
            format!("floor at the peak: minReplicas {}", args.oracle_replicas),
            day(f64::from(args.oracle_replicas.saturating_sub(floor))),
            mitigation(c, 1.0, 600, args.oracle_replicas),
        ),
    ];
    let _ = write!(
        md,
        "\n## Mitigations\n\nOn top of the lag + rate triggers. The seed's figures: weights baked into the image save 40 s of the cold start, a warm node pool another 122 s; overshoot divides both targets (asks for more replicas than the load needs now); the standing extra cost counts replicas held all day beyond the {floor} of the floor, and warm nodes for the {} replicas of the step at {} of a running replica's cost (stopped instances pay for their disks), at {} per replica-hour.\n\n| mitigation | outside SLA | peak backlog | peak replicas | scale-ups | standing extra cost per day |\n|---|---|---|---|---|---|\n",
        args.oracle_replicas.saturating_sub(floor),
        args.warm_node_cost,
        args.replica_cost_per_hour
    );
    for (name, extra, o) in &rows2 {
        let _ = writeln!(
            md,
            "| {name} | {:.0} s ({:.1} min) | {:.0} | {} | {} | {:.2} |",
            o.outside_sla_s,
            o.outside_sla_s / 60.0,
            o.peak_backlog,
            o.peak_replicas,
            o.scale_ups,
            extra
        );
    }
    let best = rows2
        .iter()
        .filter(|(_, _, o)| o.outside_sla_s <= 120.0)
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((name, extra, o)) => {
            let _ = writeln!(
                md,
                "\nCheapest configuration within the 2-minute goal: {name}: {:.1} min outside the SLA for {:.2} more per day.",
                o.outside_sla_s / 60.0,
                extra
            );
        }
        None => {
            let _ = writeln!(md, "\nNo configuration here reaches the 2-minute goal.");
        }
    }
    print!("{md}");
    if let Some(out) = &args.out {
        let svg_path = out.with_extension("svg");
        let plotted: Vec<(&str, &Outcome)> = vec![
            ("oracle (the seed)", &rows[0].1),
            ("lag only", &rows[1].1),
            ("lag + rate", &rows[2].1),
            ("+ baked, warm pool, overshoot 2", &rows2[6].2),
        ];
        let panel = |title: &str, f: fn(&docflow_autoscale::simulate::Sample) -> f64| Panel {
            title: title.to_owned(),
            series: plotted
                .iter()
                .map(|(name, o)| Series {
                    name: format!("{name}: {:.1} min outside the SLA", o.outside_sla_s / 60.0),
                    points: o.timeline.iter().map(|s| (s.t, f(s))).collect(),
                    dashed: false,
                })
                .collect(),
        };
        let chart = svg(
            &[
                panel("records waiting", |s| s.backlog),
                panel("replicas asked for", |s| f64::from(s.requested)),
            ],
            args.duration,
        );
        std::fs::write(&svg_path, chart)?;
        md.push_str(&format!(
            "\n![backlog and replicas over time]({})\n",
            svg_path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
    }
    if let Some(out) = &args.out {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = format!(
            "# Scale-up path, simulated\n\nCommand: `docflow simulate {}`\n\n{md}",
            std::env::args().skip(2).collect::<Vec<_>>().join(" ")
        );
        std::fs::write(out, text)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}
