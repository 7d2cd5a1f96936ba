use clap::Parser;
use docflow_replay::Cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.telemetry.init() {
        Ok(()) => docflow_replay::run(cli.command).await,
        Err(e) => Err(e.into()),
    };
    docflow_telemetry::exit_code(outcome)
}
