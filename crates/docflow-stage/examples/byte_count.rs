//! A complete stage on the layer: consumer group `byte-count` records each document's size.

use clap::Parser;
use docflow_runtime::HandlerError;
use docflow_stage::{Document, Output, Stage, StageArgs, StageError};

/// The stage's own state would live here (a model, a renderer); this one needs none.
struct ByteCount;

impl Stage for ByteCount {
    const NAME: &'static str = "byte-count";
    const VERSION: i32 = 1;

    async fn process(&self, doc: &Document) -> Result<Output, HandlerError> {
        // Runs only for a new (document, version): decoded, not done yet, bytes read from the
        // object store, digest and tenant checked. Errors choose a class and retry or DLQ.
        if doc.bytes.is_empty() {
            return Err(HandlerError::permanent(
                "empty_document",
                "nothing to count",
            ));
        }
        let summary = serde_json::json!({ "bytes": doc.bytes.len() });
        Ok(Output::default().summary(summary))
    }
}

/// `--group`, `--topic`, Kafka, registry, database, object store, workers: all shared.
#[derive(Parser)]
struct Config {
    #[command(flatten)]
    stage: StageArgs,
}

#[tokio::main]
async fn main() -> Result<(), StageError> {
    let config = Config::parse();
    let metrics = prometheus::Registry::new();
    let shutdown = docflow_telemetry::shutdown::signal();
    docflow_stage::run_until(ByteCount, &config.stage, metrics, shutdown).await
}
