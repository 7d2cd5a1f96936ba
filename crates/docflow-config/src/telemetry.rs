use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Logging and tracing.
#[derive(Debug, Clone, Args)]
pub struct TelemetryArgs {
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info,docflow_runtime=debug`.
    #[arg(long = "log", env = "RUST_LOG", default_value = "info")]
    pub log_filter: String,

    /// Log format.
    #[arg(
        long = "log-format",
        env = "DOCFLOW_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

/// Telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The log filter does not parse.
    #[error("invalid log filter {filter:?}: {reason}")]
    Filter {
        /// The filter given.
        filter: String,
        /// Parser message.
        reason: String,
    },
    /// A global subscriber was already installed.
    #[error("telemetry already initialised: {0}")]
    AlreadyInit(String),
}

impl TelemetryArgs {
    /// Installs the global tracing subscriber; logs go to stderr.
    pub fn init(&self) -> Result<(), TelemetryError> {
        let filter = EnvFilter::try_new(&self.log_filter).map_err(|e| TelemetryError::Filter {
            filter: self.log_filter.clone(),
            reason: e.to_string(),
        })?;
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        let res = match self.log_format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
        res.map_err(|e| TelemetryError::AlreadyInit(e.to_string()))
    }
}
