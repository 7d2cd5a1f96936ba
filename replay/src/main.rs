use clap::Parser;
use docflow_replay::Cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.telemetry.init() {
        Ok(()) => docflow_replay::run(cli.command).await,
        Err(e) => Err(e.into()),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line with the causes, whatever RUST_BACKTRACE says: a user error is not a
            // crash (a panic still prints its backtrace).
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
