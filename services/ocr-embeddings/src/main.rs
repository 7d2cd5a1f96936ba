//! `docflow-ocr-embeddings`: see the library docs. The same binary is the stage's
//! page-reading worker when the stage starts it as one.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    if let Some(worker) = docflow_stage::isolate::WorkerInvocation::from_args() {
        return docflow_ocr_embeddings::serve_read_worker(worker);
    }
    let config = docflow_ocr_embeddings::Config::parse();
    if let Some(code) = docflow_runtime::supervise::supervise(config.stage.consumer.supervise) {
        std::process::exit(code);
    }
    config.telemetry.init()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(docflow_ocr_embeddings::run(config))
}
