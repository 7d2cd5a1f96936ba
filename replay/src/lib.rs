//! `docflow-replay`: reprocess a topic for one consumer group after a fix, without touching
//! the other groups (each has its own offsets).
//!
//! * `plan` reads, per partition, the group's committed offset, the log start and end, and
//!   the target a reset would move to; it says how many records the group will process from
//!   there (and how many a reset forward skips), clamps targets to the log and reports each clamp, and
//!   estimates the drain time from `--rate`. It changes nothing. `--output csv` writes the
//!   targets as `topic,partition,offset` (the shape `kafka-consumer-groups --reset-offsets
//!   --from-file` reads, and `--from-file` here).
//! * `run --mode reset` does what `kafka-consumer-groups --reset-offsets` does: a dry run
//!   unless `--execute`, and a refusal while the group has members (stop them first).
//! * `run --mode side` reprocesses the range beside the live group with the stage's own
//!   binary as a temporary group (see the `side` module).
//! * `dlq` sends the group's dead letters back to their topic for that group only (see the
//!   `dlq` module).
//!
//! Targets by time use ListOffsets by time, whose answer is verified (the record there is
//! at or after the time and the one before it is earlier); when the broker's answer fails
//! that check — Kafka-API brokers other than Apache Kafka have been reported to answer it
//! wrongly in some cases — the first such record is found by a binary search over the
//! partition, assuming timestamps that do not decrease within a partition (CreateTime from
//! one producer, or LogAppendTime).

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};
use docflow_config::{KafkaArgs, TelemetryArgs};

pub mod broker;
mod dlq;
pub mod rate;
pub mod side;

pub use dlq::{DlqArgs, DlqReport, redrive, redrive_with};
pub use side::{SideRun, SideSummary};

/// Why a replay could not be planned or applied.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The broker refused or did not answer.
    #[error("{context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// The topic is not there.
    #[error("topic {0} does not exist")]
    NoSuchTopic(String),
    /// `--partition` names one the topic does not have.
    #[error("topic {topic} has no partition {partition} (it has {count})")]
    NoSuchPartition {
        /// Topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// How many it has.
        count: usize,
    },
    /// `--shift-by` needs a committed offset to shift.
    #[error(
        "partition {0} has no committed offset for this group: --shift-by cannot apply; use --from-offset, --to-earliest or --to-latest"
    )]
    NothingToShift(i32),
    /// The group is running.
    #[error(
        "group {group} has {} active member(s) ({}): stop them first — scale the Deployment to 0, or set the KEDA annotation autoscaling.keda.sh/paused-replicas: \"0\" — then run again",
        members.len(), members.join(", ")
    )]
    ActiveMembers {
        /// The group.
        group: String,
        /// Its members, `client-id (host)`.
        members: Vec<String>,
    },
    /// A plan file could not be read.
    #[error("plan file {path}: {reason}")]
    PlanFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A blocking broker task failed to run.
    #[error("broker task: {0}")]
    Task(String),
    /// The result store (where redrives are recorded) failed.
    #[error("result store: {0}")]
    Store(String),
    /// A replica's `/metrics` could not be read.
    #[error("reading the group's rate from /metrics: {0}")]
    Metrics(String),
}

impl ReplayError {
    fn kafka(context: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |source| ReplayError::Kafka { context, source }
    }
}

/// Command line of `docflow-replay`.
#[derive(Debug, Parser)]
#[command(
    name = "docflow-replay",
    version,
    about = "Reprocess a topic for one consumer group"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

/// `plan` or `run`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show per partition what a reset would do; change nothing.
    Plan(PlanArgs),
    /// Apply a plan.
    Run(RunArgs),
    /// Send a group's dead letters back to their source topic, for that group only.
    Dlq(DlqArgs),
}

/// Where each partition should start again.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false, id = "target")]
pub struct TargetArgs {
    /// This offset on every partition.
    #[arg(long)]
    pub from_offset: Option<i64>,
    /// The first record at or after this time (RFC 3339, e.g. 2026-12-04T08:00:00Z).
    #[arg(long, value_parser = parse_time)]
    pub from_timestamp: Option<i64>,
    /// The first record at or after now minus this (e.g. 2h, 30m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub by_duration: Option<Duration>,
    /// The committed offset moved by this many records (negative: back).
    #[arg(long, allow_hyphen_values = true)]
    pub shift_by: Option<i64>,
    /// The log start.
    #[arg(long)]
    pub to_earliest: bool,
    /// The log end (skip everything not yet processed).
    #[arg(long)]
    pub to_latest: bool,
    /// `topic,partition,offset` lines (what `plan --output csv` writes).
    #[arg(long)]
    pub from_file: Option<PathBuf>,
}

/// What `plan` and `run` share.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// The consumer group to reprocess for.
    #[arg(long)]
    pub group: String,
    /// The topic it consumes.
    #[arg(long)]
    pub topic: String,
    /// Where to start again.
    #[command(flatten)]
    pub target: TargetArgs,
    /// Only these partitions (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub partition: Vec<i32>,
    /// End of the range to reprocess (exclusive; default: the log end). Counts only.
    #[arg(long)]
    pub to_offset: Option<i64>,
    /// The group's rate, records/s, for the drain estimate.
    #[arg(long, conflicts_with = "metrics_url")]
    pub rate: Option<f64>,
    /// Measure the rate instead: a replica's `/metrics` URL (repeatable, one per replica;
    /// the rates add up), read twice `--sample` apart while the group is running.
    #[arg(long)]
    pub metrics_url: Vec<String>,
    /// How long the rate is measured over.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub sample: Duration,
    /// Table for people, CSV (`topic,partition,offset`) for `--from-file`.
    #[arg(long, value_enum, default_value = "table")]
    pub output: Output,
    /// Kafka.
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

/// `run`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// How to reprocess: `reset` moves the group's committed offsets; `side` runs the
    /// stage command (after `--`) as a temporary group over the range, beside the live one.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// Apply it (without: a dry run that prints the plan).
    #[arg(long)]
    pub execute: bool,
    /// Side mode: the replay's id; the same id resumes an interrupted replay (default: a
    /// new one, printed).
    #[arg(long)]
    pub replay_id: Option<String>,
    /// Side mode: most records the side replica starts per second (0: no limit).
    #[arg(long, default_value_t = 0.0)]
    pub max_rate: f64,
    /// Side mode: where the replay's ranges are kept for a resume.
    #[arg(long, default_value = ".replay")]
    pub state_dir: PathBuf,
    /// The plan.
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Side mode: the stage's command and flags (after `--`; the tool adds `--group`,
    /// `--assign-range`, `--max-rate` and `--metrics-listen`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// How `run` reprocesses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Move the group's committed offsets (the group must be stopped).
    Reset,
    /// Reprocess the range with a temporary group beside the live one.
    Side,
}

/// Plan output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table.
    Table,
    /// `topic,partition,offset` lines.
    Csv,
}

fn parse_time(s: &str) -> Result<i64, String> {
    let t = humantime::parse_rfc3339_weak(s).map_err(|e| e.to_string())?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis();
    i64::try_from(ms).map_err(|e| e.to_string())
}

/// One partition of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionPlan {
    /// Partition.
    pub partition: i32,
    /// The group's committed offset (`None`: nothing committed).
    pub committed: Option<i64>,
    /// Log start.
    pub start: i64,
    /// Log end.
    pub end: i64,
    /// Where the group would start again.
    pub target: i64,
    /// The target asked for, when it lay outside [start, end] and was clamped.
    pub clamped_from: Option<i64>,
    /// Records from the target to the range end (`--to-offset` or the log end): the
    /// group's lag right after a reset, what it will process (again or for the first time).
    pub to_process: i64,
}

/// A plan for one group and topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Per partition.
    pub partitions: Vec<PartitionPlan>,
}

impl Plan {
    /// Records the group will process after the reset, all partitions together.
    pub fn total(&self) -> i64 {
        self.partitions.iter().map(|p| p.to_process).sum()
    }

    /// The plan as `topic,partition,offset` lines.
    pub fn csv(&self) -> String {
        self.partitions
            .iter()
            .map(|p| format!("{},{},{}\n", self.topic, p.partition, p.target))
            .collect()
    }

    /// The plan as a table, with the drain estimate at `rate` records/s.
    pub fn table(&self, rate: Option<f64>) -> String {
        let mut out = format!(
            "group {} on {}\n{:>9} {:>12} {:>12} {:>12} {:>12} {:>12}  note\n",
            self.group,
            self.topic,
            "partition",
            "committed",
            "log start",
            "log end",
            "target",
            "to process"
        );
        for p in &self.partitions {
            let committed = p.committed.map_or("-".to_owned(), |c| c.to_string());
            let note = match (p.clamped_from, p.committed) {
                (Some(asked), _) => format!("asked {asked}, clamped to the log"),
                (None, Some(c)) if p.target > c => format!("skips {} records", p.target - c),
                _ => String::new(),
            };
            out.push_str(&format!(
                "{:>9} {:>12} {:>12} {:>12} {:>12} {:>12}  {note}\n",
                p.partition, committed, p.start, p.end, p.target, p.to_process
            ));
        }
        let total = self.total();
        out.push_str(&format!("total to process: {total} records"));
        match rate {
            Some(r) if r > 0.0 => {
                let secs = total as f64 / r;
                out.push_str(&format!(
                    "; at {r} records/s: about {}\n",
                    humantime::format_duration(Duration::from_secs(secs.ceil() as u64))
                ));
            }
            _ => out.push_str(" (give --rate for a drain estimate)\n"),
        }
        out
    }
}

/// Finds the first offset in [`start`, `end`) whose record's time is at or after `ts`
/// (`end` when none is), given the broker's `answer` and `read` (the first record at or
/// after an offset: its offset and time). The answer is used when it checks out; otherwise
/// a binary search over the partition finds it.
pub fn first_at_or_after(
    start: i64,
    end: i64,
    ts: i64,
    answer: Option<i64>,
    mut read: impl FnMut(i64) -> Result<Option<(i64, i64)>, ReplayError>,
) -> Result<i64, ReplayError> {
    // Whether the first record at or after `o` is at or after `ts` (none left: yes).
    let mut at_or_after =
        |o: i64| -> Result<bool, ReplayError> { Ok(read(o)?.is_none_or(|(_, t)| t >= ts)) };
    let candidate = answer.unwrap_or(end).clamp(start, end);
    // Verified: the record there is at or after ts (or it is the end), and the one before
    // it is earlier (or it is the start).
    let here_ok = candidate == end || at_or_after(candidate)?;
    let before_ok = candidate == start || !at_or_after(candidate - 1)?;
    if here_ok && before_ok {
        return Ok(candidate);
    }
    tracing::warn!(
        answer = ?answer,
        "the broker's offset for the time does not check out; searching the partition"
    );
    let (mut lo, mut hi) = (start, end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at_or_after(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

fn read_plan_file(path: &PathBuf, topic: &str) -> Result<Vec<(i32, i64)>, ReplayError> {
    let bad = |reason: String| ReplayError::PlanFile {
        path: path.clone(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        match fields.as_slice() {
            [t, p, o] if *t == topic => {
                let p: i32 = p
                    .parse()
                    .map_err(|_| bad(format!("line {}: partition", n + 1)))?;
                let o = o
                    .parse()
                    .map_err(|_| bad(format!("line {}: offset", n + 1)))?;
                if out.iter().any(|(q, _)| *q == p) {
                    return Err(bad(format!("line {}: partition {p} twice", n + 1)));
                }
                out.push((p, o));
            }
            [_, _, _] => {}
            _ => {
                return Err(bad(format!(
                    "line {}: expected topic,partition,offset",
                    n + 1
                )));
            }
        }
    }
    Ok(out)
}

/// Reads the broker and makes the plan (changes nothing).
pub async fn plan(args: PlanArgs) -> Result<Plan, ReplayError> {
    tokio::task::spawn_blocking(move || plan_blocking(&args))
        .await
        .map_err(|e| ReplayError::Task(e.to_string()))?
}

fn plan_blocking(args: &PlanArgs) -> Result<Plan, ReplayError> {
    let c = broker::client(&args.kafka, &args.group)?;
    let topic = args.topic.as_str();
    let mut partitions = broker::partitions(&c, topic)?;
    if let Some(p) = args.partition.iter().find(|p| !partitions.contains(p)) {
        return Err(ReplayError::NoSuchPartition {
            topic: topic.to_owned(),
            partition: *p,
            count: partitions.len(),
        });
    }
    if !args.partition.is_empty() {
        partitions.retain(|p| args.partition.contains(p));
    }
    let from_file = match &args.target.from_file {
        Some(path) => {
            let rows = read_plan_file(path, topic)?;
            if rows.is_empty() {
                return Err(ReplayError::PlanFile {
                    path: path.clone(),
                    reason: format!("no line for topic {topic}"),
                });
            }
            if let Some((p, _)) = rows.iter().find(|(p, _)| !partitions.contains(p)) {
                return Err(ReplayError::PlanFile {
                    path: path.clone(),
                    reason: format!("partition {p} is not a partition of {topic}"),
                });
            }
            // Like kafka-consumer-groups: only the partitions the file lists are reset.
            partitions.retain(|p| rows.iter().any(|(q, _)| q == p));
            Some(rows)
        }
        None => None,
    };
    let committed = broker::committed(&c, topic, &partitions)?;
    let since = match (args.target.from_timestamp, args.target.by_duration) {
        (Some(ts), _) => Some(ts),
        (None, Some(d)) => Some(
            docflow_runtime::metrics::now_ms() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        ),
        _ => None,
    };
    let mut out = Vec::new();
    for (&partition, committed) in partitions.iter().zip(committed) {
        let (start, end) = broker::watermarks(&c, topic, partition)?;
        let t = &args.target;
        let asked = if let Some(o) = t.from_offset {
            o
        } else if let Some(ts) = since {
            let answer = broker::offset_for_time(&c, topic, partition, ts)?;
            first_at_or_after(start, end, ts, answer, |o| {
                broker::record_at(&c, topic, partition, o)
            })?
        } else if let Some(k) = t.shift_by {
            committed.ok_or(ReplayError::NothingToShift(partition))? + k
        } else if t.to_earliest {
            start
        } else if t.to_latest {
            end
        } else if let Some((_, o)) = from_file
            .as_ref()
            .and_then(|f| f.iter().find(|(p, _)| *p == partition))
        {
            *o
        } else {
            committed.unwrap_or(end)
        };
        let target = asked.clamp(start, end);
        let range_end = args.to_offset.map_or(end, |m| m.clamp(start, end));
        out.push(PartitionPlan {
            partition,
            committed,
            start,
            end,
            target,
            clamped_from: (target != asked).then_some(asked),
            to_process: (range_end - target).max(0),
        });
    }
    Ok(Plan {
        group: args.group.clone(),
        topic: args.topic.clone(),
        partitions: out,
    })
}

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
                println!("dry run: nothing redriven (add --execute to redrive)");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition with records at offsets 10..20, timestamps 1000 * offset.
    fn read(o: i64) -> Result<Option<(i64, i64)>, ReplayError> {
        Ok((o < 20).then(|| (o.max(10), 1000 * o.max(10))))
    }

    #[test]
    fn a_right_answer_is_kept_and_a_wrong_one_corrected() {
        // Right: 15 is the first record at or after 14,500.
        assert_eq!(
            first_at_or_after(10, 20, 14_500, Some(15), read).unwrap(),
            15
        );
        // Wrong answers (too late, too early, none) are corrected by the search.
        for wrong in [Some(18), Some(11), None, Some(99)] {
            assert_eq!(
                first_at_or_after(10, 20, 14_500, wrong, read).unwrap(),
                15,
                "{wrong:?}"
            );
        }
        // Every record is earlier: the end; every record later: the start.
        assert_eq!(first_at_or_after(10, 20, 99_000, None, read).unwrap(), 20);
        assert_eq!(first_at_or_after(10, 20, 0, Some(10), read).unwrap(), 10);
        assert_eq!(first_at_or_after(10, 20, 0, Some(13), read).unwrap(), 10);
    }

    #[test]
    fn plans_render_as_a_table_and_as_csv() {
        let plan = Plan {
            group: "g".into(),
            topic: "t".into(),
            partitions: vec![
                PartitionPlan {
                    partition: 0,
                    committed: Some(40),
                    start: 0,
                    end: 50,
                    target: 10,
                    clamped_from: None,
                    to_process: 40,
                },
                PartitionPlan {
                    partition: 1,
                    committed: None,
                    start: 5,
                    end: 8,
                    target: 5,
                    clamped_from: Some(0),
                    to_process: 3,
                },
            ],
        };
        assert_eq!(plan.csv(), "t,0,10\nt,1,5\n");
        let table = plan.table(Some(1.0));
        assert!(table.contains("asked 0, clamped to the log"), "{table}");
        assert!(
            table.contains("total to process: 43 records; at 1 records/s: about 43s"),
            "{table}"
        );
    }
}
