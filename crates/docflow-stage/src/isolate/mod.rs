//! Risky native work in worker processes: a document that makes a native library (pdfium,
//! an image decoder, OCR) allocate without end, spin or crash takes down one worker, never
//! the stage.
//!
//! A stage owns [`Workers`] (the typed layer over a [`WorkerPool`]): long-lived child processes of its own executable, started
//! with [`WORKER_ARG`], one per concurrent job at most. Each worker limits itself
//! (`RLIMIT_DATA`, the heap and private mappings, to `--worker-memory`; `RLIMIT_CPU` to
//! `--worker-cpu` more seconds before each job) and the parent bounds each job by
//! `--worker-timeout` of wall-clock time and kills a worker that uses no CPU for
//! `--worker-stall` mid-job (stuck on a lock). A worker that dies, runs out of time or
//! stalls is replaced, and the job fails with [`IsolationError`], whose
//! [`IsolationError::class`] (`memory_limit`, `timeout`, `stalled`, `worker_crashed`) is the
//! dead-letter class; a panicking worker's message and location are in it. A worker ends
//! itself when its stage is gone. Workers do not share a lock either: pdfium's global lock
//! is per process.
//!
//! Protocol over the worker's stdin/stdout: a request is a 4-byte big-endian length and the
//! job's bytes; an answer is one status byte (0 ok, 1 the job's own error), a 4-byte length
//! and the payload. A worker serves jobs until its stdin closes. Stages use it through the
//! typed layer ([`Isolated`], [`Workers`]): settings, answers and refusals as serde values.
//!
//! Layout: this file holds the limits ([`IsolationArgs`]), the errors ([`IsolationError`])
//! and the protocol's constants; `pool` the stage side ([`WorkerPool`]: starting, feeding,
//! watching and burying worker processes); `worker` the worker side
//! ([`WorkerInvocation::serve`], its limits, panic report and parent watch); `usage` what a
//! process uses ([`MemoryUse`], [`process_cpu_seconds`]); `typed` the typed layer.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

mod pool;
mod typed;
mod usage;
mod worker;

#[cfg(test)]
mod tests;

pub use pool::WorkerPool;
pub use typed::{InProcess, Isolated, Refusal, Reply, ServeError, StartError, Workers, serve};
pub use usage::{MemoryUse, process_cpu_seconds};
pub use worker::WorkerInvocation;

/// The first argument of a worker process.
pub const WORKER_ARG: &str = "--docflow-isolated-worker";

/// Largest request or answer accepted over the pipe.
const MAX_FRAME: u32 = 1 << 30;

/// The environment variable a pool's workers find their stage's process id in.
pub const PARENT_ENV: &str = "DOCFLOW_WORKER_PARENT";

/// How a worker's panic hook starts the one line it writes to stderr: the panic's message
/// and location follow (`… at src/file.rs:412:13`). The pool reports that line, whatever
/// the runtime prints after it (a backtrace, `note: run with RUST_BACKTRACE=1`).
pub const PANIC_LINE: &str = "docflow worker panicked: ";

/// Limits of a stage's worker processes.
#[derive(Debug, Clone, Args)]
pub struct IsolationArgs {
    /// Memory one worker process may hold: its heap and private mappings (RLIMIT_DATA).
    /// A stage holds at most `--workers` of them.
    #[arg(long, env = "DOCFLOW_WORKER_MEMORY", default_value = "1GiB", value_parser = parse_bytes)]
    pub worker_memory: u64,

    /// Memory all of a stage's worker processes may hold together: each worker's limit is
    /// the smaller of `--worker-memory` and this divided by `--workers`, so raising
    /// `--workers` never raises what the replica can take (size the pod for this plus the
    /// stage process itself).
    #[arg(long, env = "DOCFLOW_STAGE_MEMORY", default_value = "4GiB", value_parser = parse_bytes)]
    pub stage_memory: u64,

    /// CPU time one job may use in a worker (RLIMIT_CPU, raised before each job).
    #[arg(
        long,
        env = "DOCFLOW_WORKER_CPU",
        default_value = "30s",
        value_parser = docflow_config::parse_duration
    )]
    pub worker_cpu: Duration,

    /// Wall-clock time one job may take before its worker is killed.
    #[arg(
        long,
        env = "DOCFLOW_WORKER_TIMEOUT",
        default_value = "60s",
        value_parser = docflow_config::parse_duration
    )]
    pub worker_timeout: Duration,

    /// A job whose worker uses no CPU for this long is stuck (blocked on a lock after an
    /// allocation failed, say): its worker is killed and the job fails as `stalled`, long
    /// before `--worker-timeout`. Workers only compute, so a live one is never idle this
    /// long. Checked once a second (CPU time moves in 10 ms ticks); 0 turns it off.
    #[arg(
        long,
        env = "DOCFLOW_WORKER_STALL",
        default_value = "20s",
        value_parser = docflow_config::parse_duration
    )]
    pub worker_stall: Duration,

    /// Executable of the worker processes (default: this program).
    #[arg(long, env = "DOCFLOW_WORKER_EXE")]
    pub worker_exe: Option<PathBuf>,

    /// Workers a pool runs at once (set by [`IsolationArgs::for_workers`]; 0: no bound).
    /// A job waits its turn, first come first served, when all are busy.
    #[arg(skip)]
    pub max_workers: usize,
}

impl IsolationArgs {
    /// These limits for a stage running `workers` jobs at once: at most `workers` worker
    /// processes, each one's memory limit lowered so that together they stay within
    /// `--stage-memory`.
    pub fn for_workers(mut self, workers: usize) -> Self {
        self.max_workers = workers.max(1);
        let share = self.stage_memory / u64::try_from(workers.max(1)).unwrap_or(u64::MAX);
        if share < self.worker_memory {
            tracing::info!(
                worker_memory = self.worker_memory,
                stage_memory = self.stage_memory,
                workers,
                share,
                "worker memory limit lowered to a share of --stage-memory"
            );
            self.worker_memory = share;
        }
        self
    }
}

/// `1GiB`, `512MiB`, `64KiB`, `1000000` (bytes).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        _ => {
            return Err(format!(
                "invalid size unit in {s:?}: use B, KiB, MiB or GiB"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

/// Why an isolated job produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    /// The worker ran out of memory (its allocation failed and it died).
    #[error("the worker ran out of its {limit_bytes} byte memory limit and died ({detail})")]
    MemoryLimit {
        /// The limit.
        limit_bytes: u64,
        /// Exit status and the end of its stderr.
        detail: String,
    },
    /// The job used its CPU time or wall-clock time; the worker was killed.
    #[error("the job ran out of time ({detail}); its worker was killed")]
    Timeout {
        /// Which limit.
        detail: String,
    },
    /// The worker stopped using CPU mid-job (blocked for good); it was killed.
    #[error("the worker used no CPU for {idle:?} mid-job (stuck); it was killed")]
    Stalled {
        /// How long it was idle.
        idle: Duration,
    },
    /// The worker died for another reason (a crash in native code).
    #[error("the worker died: {detail}")]
    Crashed {
        /// Exit status and the end of its stderr.
        detail: String,
    },
    /// The job's own error, as a worker of the raw protocol reported it.
    #[error("{0}")]
    Job(String),
    /// The worker refused the document ([`Isolated::run`]'s refusal, its class checked
    /// against the stage's).
    #[error("{0}")]
    Refused(Refusal),
    /// The worker answered something that does not decode.
    #[error("malformed answer from the worker: {detail}")]
    Malformed {
        /// What was wrong with it.
        detail: String,
    },
    /// A worker could not be started or talked to.
    #[error("worker process {context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl IsolationError {
    /// The dead-letter class.
    pub fn class(&self) -> &'static str {
        match self {
            IsolationError::MemoryLimit { .. } => "memory_limit",
            IsolationError::Timeout { .. } => "timeout",
            IsolationError::Stalled { .. } => "stalled",
            IsolationError::Crashed { .. } => "worker_crashed",
            IsolationError::Job(_) => "job",
            IsolationError::Refused(r) => r.class,
            IsolationError::Malformed { .. } => "malformed_answer",
            IsolationError::Io { .. } => "worker_io",
        }
    }
}
