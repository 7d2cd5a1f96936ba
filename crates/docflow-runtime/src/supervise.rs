//! The supervisor: how a successor learns how its predecessor died.
//!
//! A process cannot see its own death, and the next process cannot tell a record that
//! aborted or exhausted its process from a `kill -9`, a node lost or a spot reclaim: all
//! leave the same unreleased claims. So a stage binary runs as two processes. The first,
//! the supervisor, does nothing but run the second (the same binary and arguments, the
//! real replica) and watch it: SIGTERM/SIGINT are forwarded to it; when it dies, the
//! supervisor starts a new one (after 1 s, doubling to 30 s while they keep dying young).
//! When it died of its own fault — a signal other than a stop request (SIGABRT, SIGSEGV,
//! the OOM killer's SIGKILL) or a panic's exit status (101) — the supervisor keeps the last
//! lines it wrote on stderr and tells the new replica which life died and how
//! ([`previous_death`]); the new replica records that in the delivery ledger before it
//! consumes anything. A death nobody recorded (the supervisor killed with it, a pod
//! deleted, the node lost) counts against no record unless it happens
//! [`crate::ledger::UNSEEN_FACTOR`] times as often (see [`crate::ledger`]).
//!
//! A replica whose supervisor is gone ends itself at once (a thread watches its parent),
//! leaving its claims as a death would. Other exits (0, a configuration error) end the
//! supervisor with the same status. `--supervise false` runs the replica alone in one
//! process: every death is then unseen.
//!
//! Unix only, as the whole project.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The replica's process life id, set by its supervisor.
pub const LIFE_ENV: &str = "DOCFLOW_LIFE";
/// The supervisor's process id, which the replica watches.
pub const SUPERVISOR_ENV: &str = "DOCFLOW_SUPERVISOR_PID";
/// The life that died before this one, when its supervisor saw it die.
pub const PREVIOUS_LIFE_ENV: &str = "DOCFLOW_PREVIOUS_LIFE";
/// How it died: a signal or exit status and its last words on stderr.
pub const PREVIOUS_DEATH_ENV: &str = "DOCFLOW_PREVIOUS_DEATH";

/// How often a replica checks that its supervisor is there.
pub const PARENT_CHECK: Duration = Duration::from_millis(250);
/// Lines of a replica's stderr kept for its cause of death.
const LAST_WORDS: usize = 12;
/// Characters of its last words in a cause of death (a dead letter's message names three).
const LAST_WORDS_CHARS: usize = 200;
/// A replica that lived this long restarts after the shortest delay again.
const HEALTHY_LIFE: Duration = Duration::from_secs(60);
const FIRST_DELAY: Duration = Duration::from_secs(1);
/// How long a dead replica's stderr is read to its end.
const ECHO_DRAIN: Duration = Duration::from_secs(2);
const MAX_DELAY: Duration = Duration::from_secs(30);

/// This process's life: the id its supervisor gave it, or a new random one.
pub fn life() -> &'static str {
    static LIFE: OnceLock<String> = OnceLock::new();
    LIFE.get_or_init(|| {
        std::env::var(LIFE_ENV)
            .ok()
            .filter(|l| !l.is_empty())
            .unwrap_or_else(new_life)
    })
}

fn new_life() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The life that died before this one and how, when a supervisor saw it.
pub fn previous_death() -> Option<(String, String)> {
    let life = std::env::var(PREVIOUS_LIFE_ENV).ok()?;
    let cause = std::env::var(PREVIOUS_DEATH_ENV).ok()?;
    (!life.is_empty()).then_some((life, cause))
}

/// Runs this process as the supervisor of a replica, or returns `None` where it should
/// go on as the replica itself: when `enabled` is false, or when it is the replica (then
/// a thread ends it should its supervisor go). `Some(code)`: the supervisor is done and
/// the process should exit with `code`.
pub fn supervise(enabled: bool) -> Option<i32> {
    if std::env::var_os(LIFE_ENV).is_some() {
        if let Some(supervisor) = std::env::var(SUPERVISOR_ENV)
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
        {
            // Not eprintln!: it panics when stderr is a pipe nobody reads any more (the
            // supervisor's), and a panic would end this thread instead of the process.
            let said = move |was: u32, now: u32| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "docflow: the supervisor (process {supervisor}, parent {was}) is gone \
                     (parent now {now}); exiting"
                );
            };
            let now = std::os::unix::process::parent_id();
            if now != supervisor {
                said(supervisor, now);
                die();
            }
            if let Err(e) = watch_parent(said) {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "docflow: cannot watch the supervisor: {e}"
                );
            }
        }
        return None;
    }
    if !enabled {
        return None;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("docflow supervisor: cannot start ({e}); running unsupervised");
            return None;
        }
    };
    Some(runtime.block_on(run_replicas()))
}

/// Ends this process at once, as a death: SIGKILL to itself (no exit handlers while other
/// threads run, no core dump); its claims stay, as they would after a kill.
pub fn die() -> ! {
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    std::process::abort()
}

/// Ends this process ([`die`]) from a thread once its parent is no longer the one it has
/// now, after `gone(was, now)` says why. The
/// process is reparented when its parent dies, which the thread sees within
/// [`PARENT_CHECK`]. Safe code in place of `PR_SET_PDEATHSIG`, which follows the thread
/// that spawned the process (a runtime thread may end), not the parent process.
pub fn watch_parent(gone: impl FnOnce(u32, u32) + Send + 'static) -> std::io::Result<()> {
    let parent = std::os::unix::process::parent_id();
    std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            loop {
                let now = std::os::unix::process::parent_id();
                if now != parent {
                    gone(parent, now);
                    die();
                }
                // Spurious wake-ups only check sooner.
                std::thread::park_timeout(PARENT_CHECK);
            }
        })
        .map(drop)
}

/// Starts replicas until one ends for a reason other than dying, or a signal says stop.
async fn run_replicas() -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("docflow supervisor: cannot handle signals");
        return 1;
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("docflow supervisor: cannot find its own executable: {e}");
            return 1;
        }
    };
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let mut previous: Option<(String, String)> = None;
    let mut delay = FIRST_DELAY;
    loop {
        let life = new_life();
        let mut command = tokio::process::Command::new(&exe);
        command
            .args(&args)
            .env(LIFE_ENV, &life)
            .env(SUPERVISOR_ENV, std::process::id().to_string())
            .env_remove(PREVIOUS_LIFE_ENV)
            .env_remove(PREVIOUS_DEATH_ENV)
            .stderr(std::process::Stdio::piped());
        if let Some((l, cause)) = &previous {
            command
                .env(PREVIOUS_LIFE_ENV, l)
                .env(PREVIOUS_DEATH_ENV, cause);
        }
        let mut child = match command.spawn() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("docflow supervisor: cannot start {}: {e}", exe.display());
                return 1;
            }
        };
        let started = Instant::now();
        let last_words = Arc::new(Mutex::new(VecDeque::new()));
        let echo = child
            .stderr
            .take()
            .map(|stderr| tokio::spawn(echo_stderr(stderr, last_words.clone())));
        let mut stopping = false;
        let status = tokio::select! {
            s = child.wait() => s,
            _ = term.recv() => { stopping = true; forward(&child); child.wait().await }
            _ = int.recv() => { stopping = true; forward(&child); child.wait().await }
        };
        // Its stderr closes with it, unless a process it started kept it open.
        if let Some(mut echo) = echo
            && tokio::time::timeout(ECHO_DRAIN, &mut echo).await.is_err()
        {
            echo.abort();
        }
        let status = match status {
            Ok(s) => s,
            Err(e) => {
                eprintln!("docflow supervisor: lost the replica: {e}");
                return 1;
            }
        };
        reap_orphans();
        if stopping {
            // Stopped before it could handle the signal (still starting): a stop all the same.
            return status.code().unwrap_or(0);
        }
        if status.success() {
            return 0;
        }
        let cause = match died(status, &last_words) {
            Death::Exit(code) => return code,
            Death::Died(cause) => cause,
        };
        if started.elapsed() >= HEALTHY_LIFE {
            delay = FIRST_DELAY;
        }
        eprintln!(
            "docflow supervisor: life {life} died ({}); a new one in {delay:?}",
            cause
                .as_deref()
                .unwrap_or("stopped by a signal from outside: not its fault")
        );
        previous = cause.map(|c| (life, c));
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = term.recv() => return 0,
            _ = int.recv() => return 0,
        }
        reap_orphans();
        delay = (delay * 2).min(MAX_DELAY);
    }
}

/// Reaps processes left to the supervisor (as a container's first process, it inherits
/// the dead replica's workers, which end themselves): none is its own replica now.
fn reap_orphans() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Sends SIGTERM on to the replica.
fn forward(child: &tokio::process::Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok())
        && let Err(e) = kill(Pid::from_raw(pid), Signal::SIGTERM)
    {
        eprintln!("docflow supervisor: cannot signal the replica: {e}");
    }
}

/// Copies the replica's stderr to ours line by line, keeping the last lines.
async fn echo_stderr(stderr: tokio::process::ChildStderr, last: Arc<Mutex<VecDeque<String>>>) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // A line at a time, as the replica wrote it (small writes: blocking is brief).
        let _ = std::io::stderr().lock().write_all(&bytes);
        let line = String::from_utf8_lossy(&bytes);
        let line = line.trim_end_matches(['\n', '\r']);
        if let Ok(mut last) = last.lock() {
            if last.len() == LAST_WORDS {
                last.pop_front();
            }
            last.push_back(plain(line).chars().take(400).collect());
        }
    }
}

/// How a replica ended, for its supervisor.
enum Death {
    /// An exit the supervisor passes on (a configuration error, say).
    Exit(i32),
    /// It died: started again, with the cause when it was its own fault (a signal other
    /// than a stop request, a panic's exit status), with its last words.
    Died(Option<String>),
}

/// Signals that ask a process to stop: sent from outside, never the record's doing.
const STOP_SIGNALS: [i32; 4] = [1, 2, 3, 15];

fn died(status: std::process::ExitStatus, last: &Mutex<VecDeque<String>>) -> Death {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.signal(), status.code()) {
        (Some(sig), _) if STOP_SIGNALS.contains(&sig) => return Death::Died(None),
        (Some(sig), _) => format!("killed by signal {sig}{}", signal_name(sig)),
        (None, Some(101)) => "exit status 101 (a panic)".to_owned(),
        (None, code) => return Death::Exit(code.unwrap_or(1)),
    };
    // The end of a long line: a log line's message follows its spans and target.
    let words = last.lock().map(|l| last_words(&l)).unwrap_or_default();
    let n = words.chars().count();
    let words = if n > LAST_WORDS_CHARS {
        let tail: String = words.chars().skip(n - LAST_WORDS_CHARS).collect();
        format!("…{tail}")
    } else {
        words
    };
    Death::Died(Some(if words.is_empty() {
        how
    } else {
        format!("{how}: {words}")
    }))
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        8 => " (SIGFPE)",
        9 => " (SIGKILL: the OOM killer's signal)",
        11 => " (SIGSEGV)",
        _ => "",
    }
}

/// `line` without its terminal colour codes (`ESC [ … letter`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// What a replica said last that tells why it died: a panic's line and message where it
/// printed one, else its last line.
fn last_words(lines: &VecDeque<String>) -> String {
    let panic = lines.iter().position(|l| l.contains("panicked at"));
    match panic {
        Some(i) => lines
            .iter()
            .skip(i)
            .take(2)
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join(" "),
        None => lines
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_owned())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_words_are_the_panic_where_there_is_one() {
        let lines: VecDeque<String> = [
            "INFO started",
            "thread 'tokio-runtime-worker' panicked at src/x.rs:3:5:",
            "index out of bounds",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(
            last_words(&lines),
            "thread 'tokio-runtime-worker' panicked at src/x.rs:3:5: index out of bounds"
        );
        let plain: VecDeque<String> = ["a", "fatal: out of memory", "  "]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(last_words(&plain), "fatal: out of memory");
    }

    #[test]
    fn colour_codes_are_not_last_words() {
        assert_eq!(
            plain("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m boom"),
            "2026 ERROR boom"
        );
    }
}
