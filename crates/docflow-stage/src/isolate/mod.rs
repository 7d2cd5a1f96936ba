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

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

mod typed;

pub use typed::{InProcess, Isolated, Refusal, Reply, ServeError, StartError, Workers, serve};

/// The first argument of a worker process.
pub const WORKER_ARG: &str = "--docflow-isolated-worker";

/// Largest request or answer accepted over the pipe.
const MAX_FRAME: u32 = 1 << 30;

/// Bytes of a dead worker's stderr kept to tell why it died.
const STDERR_TAIL: usize = 4096;

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

fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> IsolationError {
    move |source| IsolationError::Io { context, source }
}

/// A live worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: Arc<Mutex<VecDeque<u8>>>,
}

/// Worker processes of one stage; see the module docs.
pub struct WorkerPool {
    exe: PathBuf,
    /// The worker's whole argument list.
    argv: Vec<String>,
    limits: IsolationArgs,
    idle: Mutex<Vec<Worker>>,
    /// One permit per worker that may run (`max_workers`); `None`: no bound.
    slots: Option<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("exe", &self.exe)
            .field("argv", &self.argv)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// Workers run `exe` (`limits.worker_exe`, else this program) with [`WORKER_ARG`], the
    /// limits, `--` and `args` (the stage's own worker arguments).
    pub fn new(limits: IsolationArgs, args: Vec<String>) -> Result<Self, IsolationError> {
        let exe = match &limits.worker_exe {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(io("locating this program"))?,
        };
        let mut argv = vec![
            WORKER_ARG.to_owned(),
            limits.worker_memory.to_string(),
            limits.worker_cpu.as_secs().max(1).to_string(),
            "--".to_owned(),
        ];
        argv.extend(args);
        let slots =
            (limits.max_workers > 0).then(|| tokio::sync::Semaphore::new(limits.max_workers));
        Ok(WorkerPool {
            exe,
            argv,
            limits,
            idle: Mutex::new(Vec::new()),
            slots,
        })
    }

    fn spawn(&self) -> Result<Worker, IsolationError> {
        let mut child = Command::new(&self.exe)
            .args(&self.argv)
            .env(PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(io("spawning"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(IsolationError::Io {
                context: "connecting",
                source: std::io::Error::other("missing pipe"),
            });
        };
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let sink = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(worker_stderr = %line);
                let mut t = sink.lock().unwrap_or_else(|p| p.into_inner());
                t.extend(line.bytes().chain(std::iter::once(b'\n')));
                let excess = t.len().saturating_sub(STDERR_TAIL);
                t.drain(..excess);
            }
        });
        Ok(Worker {
            child,
            stdin,
            stdout,
            stderr: tail,
        })
    }

    /// Workers that may run at once (0: no bound).
    pub fn max_workers(&self) -> usize {
        self.limits.max_workers
    }

    /// Runs one job in a worker: its answer, or why there is none. A worker that fails is
    /// not reused. With `max_workers` busy, the job waits for one, in the order jobs came.
    pub async fn run(&self, job: &[u8]) -> Result<Vec<u8>, IsolationError> {
        // The permit lives as long as the job: a worker past it is idle (or gone).
        let _slot = match &self.slots {
            Some(slots) => Some(slots.acquire().await.map_err(|_| IsolationError::Io {
                context: "waiting for a worker",
                source: std::io::Error::other("the pool is closed"),
            })?),
            None => None,
        };
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut worker = match idle {
            Some(w) => w,
            None => self.spawn()?,
        };
        let pid = worker.child.id();
        let exchange = tokio::time::timeout(
            self.limits.worker_timeout,
            watched(exchange(&mut worker, job), pid, self.limits.worker_stall),
        );
        match exchange.await {
            Ok(Err(Watched::Stalled)) => {
                let _ = worker.child.kill().await;
                Err(IsolationError::Stalled {
                    idle: self.limits.worker_stall,
                })
            }
            Ok(Ok(answer)) => self.answered(worker, answer).await,
            Err(_) => {
                let _ = worker.child.kill().await;
                Err(IsolationError::Timeout {
                    detail: format!("{:?} of wall-clock time", self.limits.worker_timeout),
                })
            }
        }
    }

    /// The end of an exchange that neither timed out nor stalled.
    async fn answered(
        &self,
        worker: Worker,
        answer: std::io::Result<(u8, Vec<u8>)>,
    ) -> Result<Vec<u8>, IsolationError> {
        match answer {
            Ok((status, payload)) => {
                self.idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(worker);
                if status == 0 {
                    Ok(payload)
                } else {
                    Err(IsolationError::Job(
                        String::from_utf8_lossy(&payload).into_owned(),
                    ))
                }
            }
            Err(_) => Err(self.why_dead(worker).await),
        }
    }

    /// The worker's pipe broke: reap it and say why it died.
    async fn why_dead(&self, mut worker: Worker) -> IsolationError {
        // Its stdout closed; the exit follows at once (or it is stuck: kill it).
        let status = match tokio::time::timeout(Duration::from_secs(5), worker.child.wait()).await {
            Ok(Ok(s)) => Some(s),
            _ => {
                let _ = worker.child.kill().await;
                None
            }
        };
        // Let the stderr reader take in the last lines.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stderr = {
            let t = worker.stderr.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&t.iter().copied().collect::<Vec<u8>>()).into_owned()
        };
        let signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
        let said = last_words(&stderr);
        let detail = format!(
            "{}; stderr: {said}",
            status.map_or_else(|| "no exit status".to_owned(), |s| s.to_string()),
        );
        const SIGXCPU: i32 = 24;
        let lower = stderr.to_ascii_lowercase();
        if said.starts_with(PANIC_LINE) {
            // A panic's message may hold any words (a document's text): it is a crash.
            IsolationError::Crashed { detail }
        } else if signal == Some(SIGXCPU) {
            IsolationError::Timeout {
                detail: format!("{:?} of CPU time", self.limits.worker_cpu),
            }
        } else if [
            "memory allocation",
            "bad_alloc",
            "out of memory",
            "oom",
            // A C++ exception reaching Rust: native libraries built without exceptions
            // (pdfium) throw only the allocator's std::bad_alloc, at the memory limit.
            "foreign exception",
        ]
        .iter()
        .any(|m| lower.contains(m))
        {
            IsolationError::MemoryLimit {
                limit_bytes: self.limits.worker_memory,
                detail,
            }
        } else {
            IsolationError::Crashed { detail }
        }
    }
}

/// What a dead worker's stderr says about its death: its panic line (the last, should there
/// be several), else its own error line (a backtrace may follow it), else its last line.
fn last_words(stderr: &str) -> &str {
    stderr
        .lines()
        .rfind(|l| l.starts_with(PANIC_LINE))
        .or_else(|| {
            stderr
                .lines()
                .find(|l| l.starts_with("Error") || l.starts_with("fatal"))
        })
        .or_else(|| stderr.trim().lines().last())
        .unwrap_or("(empty)")
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

/// Why a watched exchange gave no answer.
enum Watched {
    /// Its worker used no CPU for the stall limit.
    Stalled,
}

/// `exchange`, unless process `pid` uses no CPU for `stall` first (checked every second;
/// a process whose CPU time cannot be read is never called stalled).
async fn watched<T>(
    exchange: impl std::future::Future<Output = T>,
    pid: Option<u32>,
    stall: Duration,
) -> Result<T, Watched> {
    let watch = async {
        // No process id, or `--worker-stall 0s`: not watched.
        let Some(pid) = pid.filter(|_| !stall.is_zero()) else {
            return std::future::pending().await;
        };
        let mut tick = tokio::time::interval(
            Duration::from_secs(1)
                .min(stall)
                .max(Duration::from_millis(100)),
        );
        let mut last = None;
        let mut since = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            let cpu = process_cpu_ticks(pid);
            if cpu.is_none() || cpu != last {
                last = cpu;
                since = tokio::time::Instant::now();
            } else if since.elapsed() >= stall {
                return Watched::Stalled;
            }
        }
    };
    tokio::select! {
        biased;
        answer = exchange => Ok(answer),
        stalled = watch => Err(stalled),
    }
}

/// `utime + stime` of process `pid` (every thread), in the kernel's 100 Hz ticks.
fn process_cpu_ticks(pid: u32) -> Option<u64> {
    cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `utime + stime` of a `/proc/PID/stat` line.
fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields are counted after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state (3), ppid (4), ... utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

async fn exchange(worker: &mut Worker, job: &[u8]) -> std::io::Result<(u8, Vec<u8>)> {
    let len = u32::try_from(job.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("job too large"))?;
    worker.stdin.write_all(&len.to_be_bytes()).await?;
    worker.stdin.write_all(job).await?;
    worker.stdin.flush().await?;
    let status = worker.stdout.read_u8().await?;
    let len = worker.stdout.read_u32().await?;
    if len > MAX_FRAME {
        return Err(std::io::Error::other("answer too large"));
    }
    let mut payload = vec![0u8; len as usize];
    worker.stdout.read_exact(&mut payload).await?;
    Ok((status, payload))
}

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
    /// which the pool hands back as [`IsolationError::Job`].
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

/// A worker's memory, from `/proc/self/status` (Linux), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryUse {
    /// Resident now (`VmRSS`).
    pub rss_bytes: u64,
    /// Most resident since the last [`MemoryUse::reset_peak`] (`VmHWM`).
    pub peak_rss_bytes: u64,
    /// Heap and private mappings, what `--worker-memory` limits (`VmData`).
    pub data_bytes: u64,
}

impl MemoryUse {
    /// This process's memory now; `None` where `/proc` cannot tell.
    pub fn now() -> Option<Self> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let field = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            let kib: u64 = line[name.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(kib.saturating_mul(1024))
        };
        Some(MemoryUse {
            rss_bytes: field("VmRSS:")?,
            peak_rss_bytes: field("VmHWM:")?,
            data_bytes: field("VmData:")?,
        })
    }

    /// Starts a new peak (`VmHWM` back to the current RSS; Linux 4.0 and later): a worker
    /// does this before each job, so each job's peak is its own.
    pub fn reset_peak() {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
}

/// The RLIMIT_CPU (soft, hard) for a job: `per_job` seconds past `used`, under the
/// unchanged hard limit.
fn cpu_limit(used: u64, per_job: u64, hard: u64) -> (u64, u64) {
    (used.saturating_add(per_job).min(hard), hard)
}

/// CPU seconds this process has used, rounded up: what RLIMIT_CPU counts.
fn cpu_used_secs() -> Option<u64> {
    Some(process_cpu_seconds()?.ceil() as u64)
}

/// CPU time this process has used, every thread of it (a model's thread pool included),
/// in seconds: `utime + stime` of `/proc/self/stat`, in the kernel's fixed 100 Hz user
/// ticks. (`/proc/self/schedstat` counts the main thread alone.)
pub fn process_cpu_seconds() -> Option<f64> {
    let ticks = cpu_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(ticks as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_memory_is_shared_by_its_workers() {
        let args = |worker, stage| IsolationArgs {
            worker_memory: worker,
            stage_memory: stage,
            worker_cpu: Duration::from_secs(1),
            worker_timeout: Duration::from_secs(1),
            worker_stall: Duration::from_secs(1),
            worker_exe: None,
            max_workers: 0,
        };
        // 4 workers of 1 GiB fit 4 GiB: unchanged.
        assert_eq!(args(1 << 30, 4 << 30).for_workers(4).worker_memory, 1 << 30);
        // 8 workers share 4 GiB: 512 MiB each.
        assert_eq!(
            args(1 << 30, 4 << 30).for_workers(8).worker_memory,
            512 << 20
        );
        assert_eq!(args(1 << 30, 4 << 30).for_workers(0).worker_memory, 1 << 30);
        assert_eq!(args(1 << 30, 4 << 30).for_workers(3).max_workers, 3);
    }

    /// A pool whose "workers" are `sh -c SCRIPT`.
    fn pool_of(script: &str, timeout: Duration) -> WorkerPool {
        WorkerPool {
            exe: PathBuf::from("/bin/sh"),
            argv: vec!["-c".to_owned(), script.to_owned()],
            limits: IsolationArgs {
                worker_memory: 64 << 20,
                stage_memory: 1 << 30,
                worker_cpu: Duration::from_secs(5),
                worker_timeout: timeout,
                worker_stall: Duration::from_secs(30),
                worker_exe: None,
                max_workers: 0,
            },
            idle: Mutex::new(Vec::new()),
            slots: None,
        }
    }

    #[test]
    fn each_job_moves_only_the_soft_cpu_limit() {
        let hard = u64::MAX;
        assert_eq!(cpu_limit(1, 30, hard), (31, hard));
        assert_eq!(cpu_limit(45, 30, hard), (75, hard), "after a long job");
        assert_eq!(
            cpu_limit(45, 30, 60),
            (60, 60),
            "never above the hard limit"
        );
    }

    /// The CPU a thread other than the main one burns is the process's (RLIMIT_CPU counts
    /// it; a worker's model runs on a thread pool).
    #[test]
    fn cpu_time_counts_every_thread() {
        let before = process_cpu_seconds().unwrap();
        // A thread spins until the process has used 0.3 s more CPU (the main thread only
        // waits), or 30 s pass on a machine too loaded to give it that.
        let used = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            loop {
                for _ in 0..1_000_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                let used = process_cpu_seconds().unwrap() - before;
                if used >= 0.3 || start.elapsed() > Duration::from_secs(30) {
                    return used;
                }
            }
        })
        .join()
        .unwrap();
        assert!(used >= 0.3, "{used} s");
    }

    #[test]
    fn memory_use_is_read_and_its_peak_reset() {
        let before = MemoryUse::now().unwrap();
        assert!(before.rss_bytes > 0 && before.peak_rss_bytes >= before.rss_bytes);
        assert!(before.data_bytes > 0);
        // 64 MiB touched, then freed: the peak stays until it is reset.
        let big = std::hint::black_box(vec![1u8; 64 << 20]);
        let during = MemoryUse::now().unwrap();
        drop(big);
        assert!(
            during.peak_rss_bytes >= before.rss_bytes + (60 << 20),
            "{during:?}"
        );
        MemoryUse::reset_peak();
        let after = MemoryUse::now().unwrap();
        assert!(
            after.peak_rss_bytes < during.peak_rss_bytes,
            "{after:?} vs {during:?}"
        );
    }

    #[test]
    fn cpu_ticks_are_read_past_any_command_name() {
        let stat = "4242 (a (weird) name) R 1 4242 4242 0 -1 4194560 100 0 0 0 250 17 0 0 20 0";
        assert_eq!(cpu_ticks(stat), Some(267));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("1 parsec").is_err());
        assert!(parse_bytes("99999999999GiB").is_err());
    }

    #[tokio::test]
    async fn dead_and_stuck_workers_are_classified() {
        let crash = pool_of("kill -SEGV $$", Duration::from_secs(5));
        let err = crash.run(b"x").await.unwrap_err();
        assert_eq!(err.class(), "worker_crashed", "{err}");
        let oom = pool_of(
            "echo 'memory allocation of 1073741824 bytes failed' >&2; kill -ABRT $$",
            Duration::from_secs(5),
        );
        let err = oom.run(b"x").await.unwrap_err();
        assert_eq!(err.class(), "memory_limit", "{err}");
        let stuck = pool_of("sleep 30", Duration::from_millis(300));
        let started = std::time::Instant::now();
        let err = stuck.run(b"x").await.unwrap_err();
        assert_eq!(err.class(), "timeout", "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        // A failed worker is not reused.
        assert!(stuck.idle.lock().unwrap().is_empty());
    }

    /// The example worker (`examples/isolated_worker.rs`), which `cargo test` builds beside
    /// this test binary.
    fn example_worker() -> PathBuf {
        let exe = std::env::current_exe().unwrap();
        let profile = exe.parent().and_then(std::path::Path::parent).unwrap();
        let path = profile.join("examples").join("isolated_worker");
        assert!(
            path.is_file(),
            "{} is not built (`cargo test -p docflow-stage` builds the examples)",
            path.display()
        );
        path
    }

    /// A real Rust worker running [`WorkerInvocation::serve`]: answers, refusals, a panic
    /// reported by its message and location (not by the runtime's last line of advice), an
    /// allocation past the memory limit, and a fresh worker after each death.
    #[tokio::test]
    async fn a_real_worker_answers_refuses_and_reports_its_panic() {
        let pool = WorkerPool::new(
            IsolationArgs {
                worker_memory: 256 << 20,
                stage_memory: 1 << 30,
                worker_cpu: Duration::from_secs(10),
                worker_timeout: Duration::from_secs(30),
                worker_stall: Duration::from_secs(2),
                worker_exe: Some(example_worker()),
                max_workers: 0,
            },
            Vec::new(),
        )
        .unwrap();
        assert_eq!(pool.run(b"echo hello").await.unwrap(), b"hello");
        match pool.run(b"refuse not a PDF").await {
            Err(IsolationError::Job(m)) => assert_eq!(m, "not a PDF"),
            other => panic!("{other:?}"),
        }
        let err = pool
            .run(b"panic comparison does not implement a total order")
            .await
            .unwrap_err();
        assert_eq!(err.class(), "worker_crashed", "{err}");
        let text = err.to_string();
        assert!(
            text.contains(
                "docflow worker panicked: comparison does not implement a total order at \
                 crates/docflow-stage/examples/isolated_worker.rs:"
            ),
            "{text}"
        );
        assert!(text.contains("exit status: 101"), "{text}");
        let err = pool.run(b"grow").await.unwrap_err();
        assert_eq!(err.class(), "memory_limit", "{err}");
        // Blocked without CPU (as a worker on a poisoned library's lock): killed after the
        // stall limit (2 s), not the 30 s timeout.
        let started = std::time::Instant::now();
        let err = pool.run(b"sleep").await.unwrap_err();
        assert_eq!(err.class(), "stalled", "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(pool.run(b"echo again").await.unwrap(), b"again");
    }

    /// Whether process `pid` is gone (or a zombie nobody reaps).
    fn gone(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z')),
        }
    }

    /// A worker whose stage dies (`kill -9`) mid-job stops within a second instead of
    /// burning CPU under PID 1 while the restarted stage reads the document again. The
    /// "stage" here is a shell that starts the worker on a spinning job, then is killed.
    #[tokio::test]
    async fn a_worker_does_not_outlive_its_stage() {
        let worker = example_worker();
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("jobs");
        let script = format!(
            "mkfifo {fifo}; {PARENT_ENV}=$$ {worker} {WORKER_ARG} 268435456 60 -- < {fifo} & \
             echo $!; printf '\\000\\000\\000\\004spin' > {fifo}; wait",
            fifo = fifo.display(),
            worker = worker.display()
        );
        let mut stage = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(stage.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let pid: u32 = line.trim().parse().unwrap();
        // Whatever happens below, neither process is left behind.
        struct Reap(u32, u32);
        impl Drop for Reap {
            fn drop(&mut self) {
                for pid in [self.0, self.1] {
                    let _ = std::process::Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status();
                }
            }
        }
        let _reap = Reap(stage.id(), pid);
        // The job runs (it spins for ever), then the stage is killed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!gone(pid), "the worker should be running its job");
        stage.kill().unwrap();
        stage.wait().unwrap();
        let started = std::time::Instant::now();
        while !gone(pid) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "worker {pid} outlived its stage"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[test]
    fn the_panic_line_wins_over_what_follows_it() {
        let stderr = "loading\n\
            docflow worker panicked: index out of bounds at src/a.rs:1:2\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            last_words(stderr),
            "docflow worker panicked: index out of bounds at src/a.rs:1:2"
        );
        assert_eq!(last_words("Error: no model\nat main\n"), "Error: no model");
        assert_eq!(last_words("a\nb\n"), "b");
        assert_eq!(last_words(""), "(empty)");
    }

    /// A real worker: this test binary's own `serve` loop is not reachable from here, so a
    /// shell stands in for the answer framing: status 0, length 2, "ok".
    #[tokio::test]
    async fn answers_come_back_and_workers_are_reused() {
        let pool = pool_of(
            "while head -c 5 >/dev/null; do printf '\\000\\000\\000\\000\\002ok'; done",
            Duration::from_secs(5),
        );
        assert_eq!(pool.run(b"x").await.unwrap(), b"ok");
        assert_eq!(pool.idle.lock().unwrap().len(), 1);
        assert_eq!(pool.run(b"y").await.unwrap(), b"ok");
        assert_eq!(
            pool.idle.lock().unwrap().len(),
            1,
            "the same worker served both"
        );
    }

    /// Jobs past `max_workers` wait for a worker instead of starting another process.
    #[tokio::test]
    async fn a_bounded_pool_runs_no_more_workers_than_its_bound() {
        let mut pool = pool_of(
            "while head -c 5 >/dev/null; do sleep 0.1; printf '\\000\\000\\000\\000\\002ok'; done",
            Duration::from_secs(10),
        );
        pool.limits.max_workers = 2;
        pool.slots = Some(tokio::sync::Semaphore::new(2));
        let jobs = (0..5).map(|_| pool.run(b"x"));
        for answer in futures::future::join_all(jobs).await {
            assert_eq!(answer.unwrap(), b"ok");
        }
        assert_eq!(
            pool.idle.lock().unwrap().len(),
            2,
            "two workers served five jobs"
        );
    }
}
