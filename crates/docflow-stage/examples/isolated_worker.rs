//! The smallest isolated worker: what a stage's `main` does when its [`WorkerPool`] starts
//! it, with jobs that show each way a job can end. The isolation tests run it.
//!
//! A job is a command and its argument: `echo TEXT` answers TEXT, `refuse TEXT` refuses the
//! document with TEXT, `panic TEXT` panics with TEXT, `spin` burns CPU for ever, `sleep`
//! blocks without CPU, `grow` allocates until the memory limit stops it.
//!
//! [`WorkerPool`]: docflow_stage::isolate::WorkerPool

use docflow_stage::isolate::WorkerInvocation;

fn main() -> std::io::Result<()> {
    let Some(worker) = WorkerInvocation::from_args() else {
        eprintln!("started by a WorkerPool only (see crates/docflow-stage/src/isolate/mod.rs)");
        std::process::exit(2);
    };
    worker.serve(|job| {
        let job = String::from_utf8_lossy(job);
        let (command, arg) = job.split_once(' ').unwrap_or((&job, ""));
        match command {
            "echo" => Ok(arg.as_bytes().to_vec()),
            "refuse" => Err(arg.to_owned()),
            "panic" => panic!("{arg}"),
            "spin" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "sleep" => loop {
                std::thread::park();
            },
            "grow" => {
                let mut held: Vec<Vec<u8>> = Vec::new();
                loop {
                    held.push(vec![1u8; 16 << 20]);
                }
            }
            other => Err(format!("unknown job {other:?}")),
        }
    })
}
