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
use docflow_config::KafkaArgs;
use docflow_telemetry::TelemetryArgs;

pub mod broker;
mod commands;
mod dlq;
pub mod health;
mod planning;
pub mod rate;
pub mod side;

pub use commands::{reset, run};
pub use dlq::{DlqArgs, DlqReport, redrive, redrive_with};
pub use planning::{PartitionPlan, Plan, first_at_or_after, plan};
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
