//! The worker side: a process started with [`WORKER_ARG`] limits itself, ends itself when
//! its stage is gone, reports a panic as one line, and serves jobs from its stdin.

use super::usage::process_cpu_seconds;
use super::{MAX_FRAME, PANIC_LINE, PARENT_ENV, WORKER_ARG};

/// This process as a worker: how it was started.
#[derive(Debug)]
pub struct WorkerInvocation {
    memory: u64,
    cpu_secs: u64,
    /// The stage's own worker arguments (after `--`).
    pub stage_args: Vec<String>,
}

impl WorkerInvocation {
    /// `Some` when this process was started as a worker ([`WORKER_ARG`] first): call it at
    /// the very start of a stage's `main`, before any runtime or logging.
    pub fn from_args() -> Option<Self> {
        let mut args = std::env::args().skip(1);
        if args.next().as_deref() != Some(WORKER_ARG) {
            return None;
        }
        let memory = args.next()?.parse().ok()?;
        let cpu_secs = args.next()?.parse().ok()?;
        if args.next().as_deref() != Some("--") {
            return None;
        }
        Some(WorkerInvocation {
            memory,
            cpu_secs,
            stage_args: args.collect(),
        })
    }

    /// Sets this process's limits, then serves jobs from stdin with `job` until stdin closes.
    /// `job` returns the answer, or the job's own error (a document the stage refuses),
    /// which the pool hands back as [`IsolationError::Job`](super::IsolationError::Job).
    pub fn serve(
        self,
        mut job: impl FnMut(&[u8]) -> Result<Vec<u8>, String>,
    ) -> std::io::Result<()> {
        use std::io::{Read, Write};
        // A panic ends the worker (its state may be half-updated; a fresh one replaces it),
        // but its message and location reach the dead letter.
        std::panic::set_hook(Box::new(report_panic));
        if let Some(parent) = std::env::var(PARENT_ENV)
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
        {
            watch_parent(parent)?;
        }
        rlimit::setrlimit(rlimit::Resource::DATA, self.memory, self.memory)?;
        let mut stdin = std::io::stdin().lock();
        let mut stdout = std::io::stdout().lock();
        loop {
            let mut len = [0u8; 4];
            match stdin.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
            let len = u32::from_be_bytes(len);
            if len > MAX_FRAME {
                return Err(std::io::Error::other("request too large"));
            }
            let mut request = vec![0u8; len as usize];
            stdin.read_exact(&mut request)?;
            // Each job gets `cpu_secs` more than what the process used so far; past it the
            // kernel sends SIGXCPU and the parent reports a timeout. Only the soft limit
            // moves: raising a hard limit needs a privilege workers do not have.
            if let Some(used) = cpu_used_secs() {
                let (_, hard) = rlimit::getrlimit(rlimit::Resource::CPU)?;
                let (soft, hard) = cpu_limit(used, self.cpu_secs, hard);
                rlimit::setrlimit(rlimit::Resource::CPU, soft, hard)?;
            }
            let (status, payload) = match job(&request) {
                Ok(answer) => (0u8, answer),
                Err(message) => (1u8, message.into_bytes()),
            };
            let len = u32::try_from(payload.len())
                .map_err(|_| std::io::Error::other("answer too large"))?;
            stdout.write_all(&[status])?;
            stdout.write_all(&len.to_be_bytes())?;
            stdout.write_all(&payload)?;
            stdout.flush()?;
        }
    }
}

/// A thread that ends this worker when its stage (process `stage`) is gone — killed with
/// `kill -9`, out of memory — so no worker burns CPU on a document the restarted stage
/// reads again (a stage already gone at start is seen at once). The parent watched is the
/// one found at start: the stage, or a wrapper (`--worker-exe` pointing at a script that
/// does not `exec`) whose own parent is the stage.
fn watch_parent(stage: u32) -> std::io::Result<()> {
    let said = move |was: u32, now: u32| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "docflow worker: its stage (process {stage}) is gone (parent was {was}, now \
             {now}); exiting"
        );
    };
    if !std::path::Path::new(&format!("/proc/{stage}")).exists() {
        let parent = std::os::unix::process::parent_id();
        said(parent, parent);
        // No exit handlers or static destructors while the native libraries' threads may
        // still be running: nobody is left to read an answer.
        docflow_runtime::supervise::die();
    }
    docflow_runtime::supervise::watch_parent(said)
}

/// Writes a panic's message and location as one [`PANIC_LINE`] line on stderr.
fn report_panic(info: &std::panic::PanicHookInfo<'_>) {
    use std::io::Write;
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)");
    let location = info.location().map_or_else(
        || "an unknown location".to_owned(),
        |l| format!("{}:{}:{}", l.file(), l.line(), l.column()),
    );
    // One line, whatever the message holds.
    let message = message.replace(['\n', '\r'], " ");
    let _ = writeln!(std::io::stderr(), "{PANIC_LINE}{message} at {location}");
}

/// The RLIMIT_CPU (soft, hard) for a job: `per_job` seconds past `used`, under the
/// unchanged hard limit.
pub(super) fn cpu_limit(used: u64, per_job: u64, hard: u64) -> (u64, u64) {
    (used.saturating_add(per_job).min(hard), hard)
}

/// CPU seconds this process has used, rounded up: what RLIMIT_CPU counts.
fn cpu_used_secs() -> Option<u64> {
    Some(process_cpu_seconds()?.ceil() as u64)
}
