//! What a process uses, read from `/proc` (Linux): a worker's memory, and CPU time, of this
//! process or (for the pool's stall watch) of a worker.

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

/// CPU time this process has used, every thread of it (a model's thread pool included),
/// in seconds: `utime + stime` of `/proc/self/stat`, in the kernel's fixed 100 Hz user
/// ticks. (`/proc/self/schedstat` counts the main thread alone.)
pub fn process_cpu_seconds() -> Option<f64> {
    let ticks = cpu_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(ticks as f64 / 100.0)
}

/// `utime + stime` of process `pid` (every thread), in the kernel's 100 Hz ticks.
pub(super) fn process_cpu_ticks(pid: u32) -> Option<u64> {
    cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `utime + stime` of a `/proc/PID/stat` line.
pub(super) fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields are counted after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state (3), ppid (4), ... utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}
