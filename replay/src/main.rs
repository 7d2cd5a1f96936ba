use clap::Parser;
use docflow_replay::Cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli.telemetry.init()?;
    docflow_replay::run(cli.command).await
}
