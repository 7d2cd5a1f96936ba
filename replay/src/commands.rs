//! What each command does: `plan`, `run` (a reset or a side replay) and `dlq`.

use docflow_config::KafkaArgs;

use crate::{
    Command, Mode, Output, Plan, PlanArgs, ReplayError, SideRun, broker, plan, rate, redrive, side,
};

/// Applies `plan` as a reset of the group's committed offsets: refused while the group
/// has members.
pub async fn reset(kafka: KafkaArgs, plan: &Plan) -> Result<(), ReplayError> {
    let (group, topic) = (plan.group.clone(), plan.topic.clone());
    let offsets: Vec<(i32, i64)> = plan
        .partitions
        .iter()
        .map(|p| (p.partition, p.target))
        .collect();
    tokio::task::spawn_blocking(move || {
        let c = broker::client(&kafka, &group)?;
        let members = broker::members(&c, &group)?;
        if !members.is_empty() {
            return Err(ReplayError::ActiveMembers { group, members });
        }
        broker::commit(&c, &topic, &offsets)
    })
    .await
    .map_err(|e| ReplayError::Task(e.to_string()))?
}

/// `--rate`, or the rate measured from `--metrics-url` (`None` without either).
async fn rate_of(args: &PlanArgs) -> Result<Option<f64>, ReplayError> {
    if args.rate.is_some() || args.metrics_url.is_empty() {
        return Ok(args.rate);
    }
    let r = rate::measure(&args.metrics_url, &args.group, args.sample).await?;
    println!(
        "measured: group {} finished {r:.1} records/s over {} ({} replica(s))",
        args.group,
        humantime::format_duration(args.sample),
        args.metrics_url.len()
    );
    Ok(Some(r))
}

/// Runs a command, printing what it plans and does.
pub async fn run(command: Command) -> anyhow::Result<()> {
    let bootstrap = match &command {
        Command::Plan(args) => args.kafka.bootstrap_servers.clone(),
        Command::Run(args) => args.plan.kafka.bootstrap_servers.clone(),
        Command::Dlq(args) => args.kafka.bootstrap_servers.clone(),
    };
    run_command(command)
        .await
        .map_err(|e| with_broker(e, &bootstrap))
}

/// A broker error names the broker it tried and what sets it.
fn with_broker(e: anyhow::Error, bootstrap: &str) -> anyhow::Error {
    let from_broker = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<ReplayError>(),
            Some(ReplayError::Kafka { .. })
        )
    });
    if from_broker {
        e.context(format!(
            "broker {bootstrap} (set by --kafka-bootstrap-servers or KAFKA_BOOTSTRAP_SERVERS)"
        ))
    } else {
        e
    }
}

async fn run_command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Plan(args) => {
            let output = args.output;
            let rate = rate_of(&args).await?;
            let plan = plan(args).await?;
            match output {
                Output::Csv => print!("{}", plan.csv()),
                Output::Table => print!("{}", plan.table(rate)),
            }
        }
        Command::Run(args) if args.mode == Mode::Side => {
            let kafka = args.plan.kafka.clone();
            let rate = rate_of(&args.plan).await?;
            let plan = plan(args.plan.clone()).await?;
            let run = SideRun {
                id: args
                    .replay_id
                    .clone()
                    .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()),
                state_dir: args.state_dir.clone(),
                max_rate: args.max_rate,
                command: args.command.clone(),
                progress_bar: true,
                log: None,
            };
            let (ranges, resumed) = side::ranges_for(&plan, &run, args.execute)?;
            let group = side::side_group(&plan.group, &run.id);
            print!("{}", plan.table(rate));
            println!(
                "side replay {group} ({}), the live group {} untouched:",
                if resumed {
                    "resumed: its first run's ranges"
                } else {
                    "new"
                },
                plan.group
            );
            for r in &ranges {
                println!("    partition {:>4}: {}..{}", r.partition, r.start, r.end);
            }
            if args.execute {
                let summary = side::run_side(&kafka, &plan, &run, &ranges).await?;
                print!("{summary}");
            } else {
                println!(
                    "dry run: would start `{} --group {group} {}`; add --execute (resume later with --replay-id {})",
                    args.command.join(" "),
                    side::range_flags(&plan.topic, &ranges).join(" "),
                    run.id
                );
            }
        }
        Command::Run(args) => {
            let kafka = args.plan.kafka.clone();
            let rate = rate_of(&args.plan).await?;
            let plan = plan(args.plan).await?;
            print!("{}", plan.table(rate));
            if args.execute {
                reset(kafka, &plan).await?;
                println!(
                    "reset applied: group {} starts again at the targets above",
                    plan.group
                );
            } else {
                println!("dry run: nothing changed (add --execute to apply)");
            }
        }
        Command::Dlq(args) => {
            let report = redrive(&args).await?;
            print!("{report}");
            if !args.execute {
                println!("dry run: nothing was sent (add --execute to redrive)");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_error_names_the_broker_and_its_flag() {
        let e = anyhow::Error::from(ReplayError::Kafka {
            context: "describing the group",
            source: rdkafka::error::KafkaError::MetadataFetch(
                rdkafka::types::RDKafkaErrorCode::BrokerTransportFailure,
            ),
        });
        let text = format!("{:#}", with_broker(e, "kafka-0:9093"));
        assert!(
            text.starts_with("broker kafka-0:9093 (set by --kafka-bootstrap-servers or KAFKA_BOOTSTRAP_SERVERS): describing the group"),
            "{text}"
        );
        let other = anyhow::anyhow!("--from must be before --to");
        assert_eq!(
            format!("{:#}", with_broker(other, "x")),
            "--from must be before --to"
        );
    }
}
