//! A complete isolated stage: consumer group `entropy` measures each document's byte
//! entropy (bits a byte: near 8 for compressed or encrypted content) in a worker process,
//! where a stage runs its work on untrusted bytes, and records it. `docs/adding-a-stage.md`
//! walks through it; a test runs it end to end against the stack.

use clap::Parser;
use docflow_runtime::HandlerError;
use docflow_stage::isolate::{Isolated, IsolationArgs, Refusal, Reply, StartError, Workers};
use docflow_stage::service::{BuildError, ServiceError};
use docflow_stage::{Document, LocalTools, Output, Stage, StageArgs, StageService};
use docflow_telemetry::TelemetryArgs;

/// The stage's command line: its own flag, then what every stage shares.
#[derive(Debug, Parser)]
#[command(name = "entropy", about = "docflow stage: byte entropy of documents")]
struct Config {
    /// Largest document measured; a larger one is refused (`too_large`).
    #[arg(long, env = "ENTROPY_MAX_BYTES", default_value_t = 64 << 20)]
    max_bytes: usize,
    /// Group, topics, Kafka, registry, database, object store, consumer runtime.
    #[command(flatten)]
    stage: StageArgs,
    /// The worker processes' limits.
    #[command(flatten)]
    isolation: IsolationArgs,
    /// Logging.
    #[command(flatten)]
    telemetry: TelemetryArgs,
}

/// The worker, in its own process: started with its settings, then one document a job.
struct Meter {
    max_bytes: usize,
}

/// A worker's answer.
#[derive(serde::Serialize, serde::Deserialize)]
struct Measured {
    bytes: usize,
    bits_per_byte: f64,
}

impl Isolated for Meter {
    type Settings = usize;
    type Answer = Measured;
    const CLASSES: &'static [&'static str] = &["too_large"];

    fn start(max_bytes: usize) -> Result<Self, StartError> {
        Ok(Meter { max_bytes })
    }

    fn run(&mut self, job: &[u8]) -> Result<Reply<Measured>, Refusal> {
        if job.len() > self.max_bytes {
            let why = format!("{} bytes, over --max-bytes {}", job.len(), self.max_bytes);
            return Err(Refusal::new("too_large", why));
        }
        let mut counts = [0u64; 256];
        for &b in job {
            counts[usize::from(b)] += 1;
        }
        let n = job.len().max(1) as f64;
        let bits_per_byte = counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| -(c as f64 / n) * (c as f64 / n).log2())
            .sum();
        Ok(Reply::new(Measured {
            bytes: job.len(),
            bits_per_byte,
        }))
    }

    fn probe() -> Vec<u8> {
        b"probe".to_vec()
    }
}

/// The stage, in the consumer's process: hands each document to a worker.
struct Entropy {
    workers: Workers<Meter>,
}

impl Stage for Entropy {
    const NAME: &'static str = "entropy";
    const VERSION: i32 = 1;

    async fn process(&self, doc: &Document) -> Result<Output, HandlerError> {
        let reply = self.workers.run(&doc.bytes).await;
        let m = reply.map_err(|e| e.into_handler_error(""))?.value;
        let summary = serde_json::json!({ "bytes": m.bytes, "bits_per_byte": m.bits_per_byte });
        Ok(Output::default().summary(summary))
    }
}

impl StageService for Entropy {
    const BINARY: &'static str = "entropy";
    type Config = Config;
    type Worker = Meter;

    fn stage_args(config: &Config) -> &StageArgs {
        &config.stage
    }

    fn telemetry(config: &Config) -> &TelemetryArgs {
        &config.telemetry
    }

    fn local(stage: StageArgs, tools: &LocalTools) -> Result<Config, clap::Error> {
        let mut config = Config::try_parse_from(["entropy"])?;
        config.isolation.worker_exe = tools.worker_exe.clone();
        config.stage = stage;
        Ok(config)
    }

    async fn build(config: &Config, _: &prometheus::Registry) -> Result<Self, BuildError> {
        let isolation = config.isolation.clone();
        let limits = isolation.for_workers(config.stage.consumer.workers);
        let workers = Workers::start(limits, &config.max_bytes).await?;
        Ok(Entropy { workers })
    }
}

fn main() -> Result<(), ServiceError> {
    docflow_stage::main::<Entropy>()
}
