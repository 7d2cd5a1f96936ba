//! `docflow`: run the embedded stack, manage topics and schemas.

use clap::Parser;

mod cli;
mod dev;
mod schemas;
mod topics;
mod upload;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    cli.telemetry.init()?;
    cli.run().await
}
