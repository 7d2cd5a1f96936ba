//! `docflow-analytics-rollup`: see the library docs.

fn main() -> anyhow::Result<()> {
    let config = docflow_analytics_rollup::Config::from_command_line();
    if let Some(code) = docflow_runtime::supervise::supervise(config.consumer.supervise) {
        std::process::exit(code);
    }
    config.telemetry.init()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(docflow_analytics_rollup::run(config))
}
