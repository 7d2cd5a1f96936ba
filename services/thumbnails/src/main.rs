//! `docflow-thumbnails`: see the library docs. The same binary is the stage's render worker
//! when the stage starts it as one.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    if let Some(worker) = docflow_stage::isolate::WorkerInvocation::from_args() {
        return docflow_thumbnails::serve_render_worker(worker);
    }
    let config = docflow_thumbnails::Config::parse();
    if let Some(code) = docflow_runtime::supervise::supervise(config.stage.consumer.supervise) {
        std::process::exit(code);
    }
    config.telemetry.init()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(docflow_thumbnails::run(config))
}
