//! `docflow plan`: scaling settings from measured service times (see
//! `docflow_autoscale::plan`), printed with the KEDA ScaledObject fields they fill.

use std::time::Duration;

use clap::Args;
use docflow_autoscale::plan::{PlanInput, plan};

/// Arguments of `docflow plan` (defaults: the seed's figures).
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Consumer group (and ScaledObject name).
    #[arg(long, default_value = "ocr-embeddings")]
    stage: String,
    /// Median service time (e.g. 40ms), measured.
    #[arg(long, default_value = "40ms", value_parser = humantime::parse_duration)]
    p50: Duration,
    /// 99th percentile service time, measured.
    #[arg(long, default_value = "40ms", value_parser = humantime::parse_duration)]
    p99: Duration,
    /// Waiting-time SLA.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    sla_wait: Duration,
    /// The consumers' `--commit-interval` (records done but not committed count as lag).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    commit_interval: Duration,
    /// Peak arrival rate, records/s.
    #[arg(long, default_value_t = 200.0)]
    peak_rate: f64,
    /// Cost of one replica per hour.
    #[arg(long, default_value_t = 1.006)]
    replica_cost_per_hour: f64,
    /// Budget per day.
    #[arg(long, default_value_t = 966.0)]
    budget_per_day: f64,
    /// Time from asking for a replica to it serving.
    #[arg(long, default_value = "227s", value_parser = humantime::parse_duration)]
    cold_start: Duration,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 12)]
    partitions: u32,
}

pub(crate) fn run_plan(args: PlanArgs) -> anyhow::Result<()> {
    let p = plan(&PlanInput {
        p50_s: args.p50.as_secs_f64(),
        p99_s: args.p99.as_secs_f64(),
        sla_wait_s: args.sla_wait.as_secs_f64(),
        commit_interval_s: args.commit_interval.as_secs_f64(),
        peak_rate: args.peak_rate,
        replica_cost_per_hour: args.replica_cost_per_hour,
        budget_per_day: args.budget_per_day,
        cold_start_s: args.cold_start.as_secs_f64(),
        partitions: args.partitions,
    })
    .map_err(anyhow::Error::msg)?;
    println!("plan for {}:", args.stage);
    println!(
        "  service rate μ            {:.2} records/s per replica (1 / p50)",
        p.service_rate
    );
    println!(
        "  lagThreshold              {} (Little's law: μ × (SLA wait + commit interval))",
        p.lag_threshold
    );
    println!(
        "  safe utilisation          {:.2} (Kingman, service-time c² {:.2} from the p50–p99 spread)",
        p.safe_utilisation, p.service_cv2
    );
    println!(
        "  replicas at the peak      {} for {} records/s",
        p.peak_replicas, args.peak_rate
    );
    println!(
        "  minReplicas               {} ({})",
        p.min_replicas,
        if args.cold_start > args.sla_wait {
            "the cold start is longer than the SLA wait: the floor carries the peak"
        } else {
            "a tenth of the peak"
        }
    );
    println!(
        "  maxReplicas               {} (limited by the {})",
        p.max_replicas, p.max_limited_by
    );
    println!(
        "  floor cost                {:.2} per day",
        p.floor_cost_per_day
    );
    println!("  max.poll.interval.ms      {}", p.max_poll_interval_ms);
    if !p.peak_fits {
        println!(
            "  WARNING: the peak needs {} replicas, more than maxReplicas {}",
            p.peak_replicas, p.max_replicas
        );
    }
    println!(
        "\n# ScaledObject fields\nspec:\n  minReplicaCount: {}\n  maxReplicaCount: {}\n  triggers:\n    - type: kafka\n      metadata:\n        consumerGroup: {}\n        lagThreshold: \"{}\"\n        activationLagThreshold: \"0\"\n        allowIdleConsumers: \"false\"",
        p.min_replicas, p.max_replicas, args.stage, p.lag_threshold
    );
    Ok(())
}
