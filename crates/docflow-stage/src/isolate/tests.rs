use super::*;

use std::process::Stdio;
use std::sync::Mutex;

use super::pool::last_words;
use super::usage::cpu_ticks;
use super::worker::cpu_limit;

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
