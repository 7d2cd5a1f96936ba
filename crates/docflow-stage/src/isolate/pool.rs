//! The stage side: a pool of worker processes, each fed one job at a time over its pipes,
//! bounded in wall-clock time and watched for stalls, and replaced when it fails, with the
//! failure classified from its exit and the end of its stderr.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::usage::process_cpu_ticks;
use super::{IsolationArgs, IsolationError, MAX_FRAME, PANIC_LINE, PARENT_ENV, WORKER_ARG};

/// Bytes of a dead worker's stderr kept to tell why it died.
const STDERR_TAIL: usize = 4096;

fn io(context: &'static str) -> impl FnOnce(std::io::Error) -> IsolationError {
    move |source| IsolationError::Io { context, source }
}

/// A live worker process.
pub(super) struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: Arc<Mutex<VecDeque<u8>>>,
}

/// Worker processes of one stage; see the [module docs](super).
pub struct WorkerPool {
    pub(super) exe: PathBuf,
    /// The worker's whole argument list.
    pub(super) argv: Vec<String>,
    pub(super) limits: IsolationArgs,
    pub(super) idle: Mutex<Vec<Worker>>,
    /// One permit per worker that may run (`max_workers`); `None`: no bound.
    pub(super) slots: Option<tokio::sync::Semaphore>,
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
pub(super) fn last_words(stderr: &str) -> &str {
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
