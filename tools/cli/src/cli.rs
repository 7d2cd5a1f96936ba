use std::path::PathBuf;

use clap::{Parser, Subcommand};
use docflow_config::{DatabaseArgs, KafkaArgs, RegistryArgs};
use docflow_telemetry::TelemetryArgs;

use crate::{
    analytics, autoscale, calibrate, dev, infra, plan, probe, schemas, simulate, status, tokens,
    topics, upload,
};

/// docflow: documents in, text, embeddings, thumbnails and analytics out, over Kafka.
#[derive(Debug, Parser)]
#[command(name = "docflow", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Logging.
    #[command(flatten)]
    pub(crate) telemetry: TelemetryArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the embedded stack (broker + schema registry), declare topics, register schemas,
    /// and push the sample documents through it.
    Dev(dev::DevArgs),
    /// Upload documents through the ingest API.
    Upload(upload::UploadArgs),
    /// Schema contract tools.
    #[command(subcommand)]
    Schemas(SchemasCommand),
    /// Topic tools.
    #[command(subcommand)]
    Topics(TopicsCommand),
    /// API tokens kept in the database (accepted by the ingest API).
    #[command(subcommand)]
    Tokens(TokensCommand),
    /// A stage's service time (p50/p99) on sample documents, by its real work.
    Calibrate(calibrate::CalibrateArgs),
    /// Scaling settings (lagThreshold, min/max replicas, ...) from measured service times.
    Plan(plan::PlanArgs),
    /// Simulate the scale-up path for a rate step (seed arithmetic, KEDA + HPA rules).
    Simulate(simulate::SimulateArgs),
    /// KEDA's Kafka scaler and the HPA as arithmetic: what a ScaledObject does with offsets.
    #[command(subcommand)]
    Autoscale(autoscale::AutoscaleCommand),
    /// infra/: Kubernetes + KEDA manifests generated from infra/plan.yaml.
    #[command(subcommand)]
    Infra(infra::InfraCommand),
    /// The analytics rollup (per tenant per hour or day), read from the database.
    Analytics(analytics::AnalyticsArgs),
    /// Each consumer group's health as Burrow judges it (OK, WARN, ERR; per partition OK,
    /// WARN, STOP, STALL, REWIND, with reasons); exits 1 when a group is not OK.
    Status(status::StatusArgs),
    /// A health check for containers: GET a URL, exit 0 on 2xx and 1 otherwise (the image
    /// has no shell or curl; compose.yaml's healthchecks run this).
    Probe(probe::ProbeArgs),
    /// Reprocess a topic for one consumer group (the same as `docflow-replay`).
    #[command(subcommand)]
    Replay(Box<docflow_replay::Command>),
}

#[derive(Debug, Subcommand)]
enum TokensCommand {
    /// Create a token for a tenant; prints it once.
    Create {
        /// Tenant the token acts as.
        #[arg(long)]
        tenant: String,
        /// Free text (who or what uses it).
        #[arg(long)]
        label: Option<String>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// List tokens (ids, tenants, state; never the secrets).
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        database: DatabaseArgs,
    },
    /// Revoke a token by the id `list` shows (at least 8 characters).
    Revoke {
        /// Token id.
        id: String,
        #[command(flatten)]
        database: DatabaseArgs,
    },
}

#[derive(Debug, Subcommand)]
enum SchemasCommand {
    /// Check that every version under the schemas directory is compatible with all earlier
    /// versions of its topic (the CI gate).
    Check {
        /// The schemas directory.
        #[arg(long, default_value = "schemas")]
        dir: PathBuf,
        /// Compatibility level to enforce.
        #[arg(long, default_value = "BACKWARD_TRANSITIVE")]
        level: docflow_events::CompatibilityLevel,
    },
    /// Register the newest schema of every topic with the registry.
    Register {
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

#[derive(Debug, Subcommand)]
enum TopicsCommand {
    /// Create docflow's topics where they do not exist.
    Create {
        #[command(flatten)]
        kafka: KafkaArgs,
        /// Partitions of doc.uploaded (the ceiling of consumer parallelism per group).
        #[arg(long, default_value_t = docflow_events::topics::DOC_UPLOADED_PARTITIONS)]
        uploaded_partitions: i32,
        /// Replication factor (3 in production).
        #[arg(long, default_value_t = 1)]
        replication: i32,
    },
}

impl Cli {
    pub(crate) async fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Dev(args) => dev::run(args).await,
            Command::Upload(args) => upload::run(args).await,
            Command::Tokens(TokensCommand::Create {
                tenant,
                label,
                database,
            }) => tokens::create(&database, &tenant, label.as_deref()).await,
            Command::Tokens(TokensCommand::List { tenant, database }) => {
                tokens::list(&database, tenant.as_deref()).await
            }
            Command::Tokens(TokensCommand::Revoke { id, database }) => {
                tokens::revoke(&database, &id).await
            }
            Command::Schemas(SchemasCommand::Check { dir, level }) => schemas::check(&dir, level),
            Command::Schemas(SchemasCommand::Register { registry }) => {
                schemas::register(&registry).await
            }
            Command::Topics(TopicsCommand::Create {
                kafka,
                uploaded_partitions,
                replication,
            }) => topics::create(&kafka, uploaded_partitions, replication).await,
            Command::Analytics(args) => analytics::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Probe(args) => probe::run(args).await,
            Command::Simulate(args) => simulate::run_simulate(args),
            Command::Plan(args) => plan::run_plan(args),
            Command::Infra(cmd) => infra::run(cmd),
            Command::Autoscale(cmd) => autoscale::run(cmd).await,
            Command::Calibrate(args) => calibrate::run_calibrate(args).await,
            Command::Replay(command) => docflow_replay::run(*command).await,
        }
    }
}
