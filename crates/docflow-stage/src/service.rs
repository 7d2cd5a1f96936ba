//! A stage's binary in one call. A stage crate implements [`StageService`] (its command
//! line, how it builds its [`Stage`], its isolated worker) and its `main.rs` is
//!
//! ```ignore
//! fn main() -> anyhow::Result<()> {
//!     Ok(docflow_stage::main::<my_stage::MyStage>()?)
//! }
//! ```
//!
//! [`main`] is the same for every stage: a process started as an isolated worker serves
//! jobs ([`crate::isolate::serve`]); otherwise the command line is parsed, the process becomes
//! the replica's supervisor ([`docflow_runtime::supervise`]) unless `--supervise false`,
//! telemetry starts, and the stage runs until SIGINT/SIGTERM ([`run_until`]). The local stack
//! (tests, `docflow dev`, `docflow calibrate`) starts a stage through the same trait
//! ([`StageService::local`], [`StageService::build`]).

use std::future::Future;
use std::path::PathBuf;

use clap::Parser;
use docflow_telemetry::TelemetryArgs;

use crate::isolate::{Isolated, ServeError, WorkerInvocation};
use crate::{Stage, StageArgs, StageError};

/// Any error a stage's start may fail with (a model that does not load, a worker that does
/// not answer its probe).
pub type BuildError = Box<dyn std::error::Error + Send + Sync>;

/// Where a local stack finds what a stage needs: a checkout's tools and its built binaries.
#[derive(Debug, Clone)]
pub struct LocalTools {
    /// The checkout's `.tools` (libraries and models, `make tools`).
    pub tools_dir: PathBuf,
    /// `libpdfium.so`.
    pub pdfium_lib: PathBuf,
    /// The stage's binary, which the stage (running inside the stack's process) starts as
    /// its isolated workers.
    pub worker_exe: Option<PathBuf>,
}

/// A stage as a service: everything its binary, the local stack and calibration need.
pub trait StageService: Stage + Sized {
    /// The binary (its workers are this binary; the local stack finds it among the
    /// workspace's built binaries).
    const BINARY: &'static str;
    /// The binary's command line: the stage's own flags, with [`StageArgs`],
    /// [`TelemetryArgs`] and (for an isolated stage) [`crate::isolate::IsolationArgs`]
    /// flattened into it.
    type Config: Parser + Send + Sync + 'static;
    /// Its isolated worker ([`crate::isolate::InProcess`] for a stage without one).
    type Worker: Isolated;

    /// The shared stage arguments inside `config`.
    fn stage_args(config: &Self::Config) -> &StageArgs;
    /// The logging arguments inside `config`.
    fn telemetry(config: &Self::Config) -> &TelemetryArgs;
    /// The stage inside a local stack: `stage` says where, `tools` where its libraries,
    /// models and worker binary are; every other setting at its command-line default.
    fn local(stage: StageArgs, tools: &LocalTools) -> Result<Self::Config, clap::Error>;
    /// The stage, its metrics registered in `registry`, its workers started and probed (a
    /// missing model or library fails here, rather than on every document).
    fn build(
        config: &Self::Config,
        registry: &prometheus::Registry,
    ) -> impl Future<Output = Result<Self, BuildError>> + Send;
}

/// Why a stage binary stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The process, started as a worker, could not serve.
    #[error(transparent)]
    Worker(#[from] ServeError),
    /// Logging could not start.
    #[error(transparent)]
    Telemetry(#[from] docflow_telemetry::TelemetryError),
    /// The async runtime could not start.
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The stage could not be built.
    #[error("{stage}: {source}")]
    Build {
        /// The stage.
        stage: &'static str,
        /// Why.
        #[source]
        source: BuildError,
    },
    /// The stage layer failed.
    #[error(transparent)]
    Stage(#[from] StageError),
}

/// A stage binary's whole `main`: see the module docs.
pub fn main<S: StageService>() -> Result<(), ServiceError> {
    if let Some(worker) = WorkerInvocation::from_args() {
        return Ok(crate::isolate::serve::<S::Worker>(worker)?);
    }
    let config = S::Config::parse();
    if let Some(code) =
        docflow_runtime::supervise::supervise(S::stage_args(&config).consumer.supervise)
    {
        std::process::exit(code);
    }
    S::telemetry(&config).init()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServiceError::Runtime)?
        .block_on(run_until::<S>(
            config,
            docflow_telemetry::shutdown::signal(),
        ))
}

/// Builds stage `S` from `config` and runs it until `shutdown`, then drains in-flight
/// documents and commits.
pub async fn run_until<S: StageService>(
    config: S::Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServiceError> {
    let registry = prometheus::Registry::new();
    let stage = S::build(&config, &registry)
        .await
        .map_err(|source| ServiceError::Build {
            stage: S::NAME,
            source,
        })?;
    crate::run_until(stage, S::stage_args(&config), registry, shutdown).await?;
    Ok(())
}
