//! `docflow simulate`: the scale-up path for a rate step, by the seed's arithmetic (one
//! decision at the step) and by KEDA + HPA rules with and without a rate trigger — time
//! outside the SLA, backlog, replicas and their cost.

use std::fmt::Write as _;

use clap::Args;
use docflow_autoscale::hpa::Hpa;
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
    print!("{md}");
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
