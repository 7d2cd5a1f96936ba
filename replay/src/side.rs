//! `run --mode side`: reprocess a range beside the live group, with the same stage code.
//!
//! The tool starts the stage's own binary (the command after `--`) as a temporary group
//! `<group>.replay.<id>` with `--assign-range` for each partition's range: that replica
//! assigns the partitions at the range starts without joining any group, never subscribes,
//! and exits by itself once every range is done; `--max-rate` throttles it. The live group
//! keeps its offsets and its members. The ranges are kept in `<state-dir>/<side
//! group>.csv`, and the replica commits its progress under the side group, so running the
//! same command again with `--replay-id <id>` resumes where an interrupted run stopped.
//! Progress is the side group's committed offsets against the ranges; dead letters are the
//! records of its own dead-letter topic.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use docflow_config::KafkaArgs;
use rdkafka::consumer::BaseConsumer;

use crate::{Plan, ReplayError, broker};

/// One partition's range: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Partition.
    pub partition: i32,
    /// First offset.
    pub start: i64,
    /// One past the last offset.
    pub end: i64,
}

/// What a side replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideSummary {
    /// The temporary group.
    pub group: String,
    /// Records of the ranges done (this run and earlier, interrupted ones).
    pub records: i64,
    /// Of those, handled.
    pub ok: i64,
    /// Of those, dead-lettered (records in the side group's dead-letter topic).
    pub dead_lettered: i64,
    /// How long this run took.
    pub took: Duration,
}

impl std::fmt::Display for SideSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "side replay {}: {} records, {} ok, {} dead-lettered, in {:.1}s",
            self.group,
            self.records,
            self.ok,
            self.dead_lettered,
            self.took.as_secs_f64()
        )
    }
}

/// The side group of `group` for replay `id`.
pub fn side_group(group: &str, id: &str) -> String {
    format!("{group}.replay.{id}")
}

/// The ranges of `plan`: from each target to the range end.
pub fn ranges_of(plan: &Plan) -> Vec<Range> {
    plan.partitions
        .iter()
        .map(|p| Range {
            partition: p.partition,
            start: p.target,
            end: p.target + p.to_process,
        })
        .collect()
}

fn state_file(dir: &Path, side: &str) -> PathBuf {
    dir.join(format!("{side}.csv"))
}

/// The ranges of an earlier run of this replay, if it was started before.
pub fn load_ranges(dir: &Path, side: &str, topic: &str) -> Result<Option<Vec<Range>>, ReplayError> {
    let path = state_file(dir, side);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ReplayError::PlanFile {
                path,
                reason: e.to_string(),
            });
        }
    };
    let bad = |reason: String| ReplayError::PlanFile {
        path: path.clone(),
        reason,
    };
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [t, p, s, e] = f.as_slice() else {
            return Err(bad(format!("{line:?}: expected topic,partition,start,end")));
        };
        if *t != topic {
            return Err(bad(format!("the replay was of topic {t}, not {topic}")));
        }
        let n = |v: &str| {
            v.parse::<i64>()
                .map_err(|_| bad(format!("{line:?}: {v:?} is not a number")))
        };
        out.push(Range {
            partition: i32::try_from(n(p)?).map_err(|_| bad(format!("{line:?}")))?,
            start: n(s)?,
            end: n(e)?,
        });
    }
    Ok(Some(out))
}

fn save_ranges(dir: &Path, side: &str, topic: &str, ranges: &[Range]) -> Result<(), ReplayError> {
    let path = state_file(dir, side);
    let io = |e: std::io::Error| ReplayError::PlanFile {
        path: path.clone(),
        reason: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut text = String::from("# topic,partition,start,end of a docflow side replay\n");
    for r in ranges {
        text.push_str(&format!("{topic},{},{},{}\n", r.partition, r.start, r.end));
    }
    std::fs::write(&path, text).map_err(io)
}

/// The `--assign-range` flags of `ranges`.
pub fn range_flags(topic: &str, ranges: &[Range]) -> Vec<String> {
    ranges
        .iter()
        .filter(|r| r.end > r.start)
        .flat_map(|r| {
            [
                "--assign-range".to_owned(),
                format!("{topic}:{}:{}-{}", r.partition, r.start, r.end),
            ]
        })
        .collect()
}

/// Records of `ranges` done by the side group (`c`'s group: its committed offsets).
fn progress(c: &BaseConsumer, topic: &str, ranges: &[Range]) -> Result<i64, ReplayError> {
    let parts: Vec<i32> = ranges.iter().map(|r| r.partition).collect();
    let committed = broker::committed(c, topic, &parts)?;
    Ok(ranges
        .iter()
        .zip(committed)
        .map(|(r, c)| c.map_or(0, |c| (c.clamp(r.start, r.end) - r.start).max(0)))
        .sum())
}

/// Records in `side`'s dead-letter topic of `topic` (0 when it has none).
fn dead_letters(c: &BaseConsumer, side: &str, topic: &str) -> Result<i64, ReplayError> {
    let dlq = docflow_runtime::dlq::topic_for(topic, side);
    let parts = match broker::partitions(c, &dlq) {
        Ok(p) => p,
        Err(ReplayError::NoSuchTopic(_)) => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut n = 0;
    for p in parts {
        let (start, end) = broker::watermarks(c, &dlq, p)?;
        n += end - start;
    }
    Ok(n)
}

fn free_port() -> Result<u16, ReplayError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ReplayError::Task(format!("finding a free port: {e}")))
}

/// What `run --mode side --execute` needs besides the plan.
#[derive(Debug, Clone)]
pub struct SideRun {
    /// Replay id (`<group>.replay.<id>`).
    pub id: String,
    /// Where the ranges are kept for a resume.
    pub state_dir: PathBuf,
    /// Records/s the side replica may start (0: no limit).
    pub max_rate: f64,
    /// The stage's binary and its flags (without `--group`, `--metrics-listen`).
    pub command: Vec<String>,
    /// Show a progress bar.
    pub progress_bar: bool,
    /// Where the side replica's output goes (default: this terminal).
    pub log: Option<PathBuf>,
}

/// The ranges of this replay and whether it resumes: those kept from an earlier run of
/// `id`, else `plan`'s (kept now for a resume when `keep`).
pub fn ranges_for(
    plan: &Plan,
    run: &SideRun,
    keep: bool,
) -> Result<(Vec<Range>, bool), ReplayError> {
    let side = side_group(&plan.group, &run.id);
    match load_ranges(&run.state_dir, &side, &plan.topic)? {
        Some(kept) => Ok((kept, true)),
        None => {
            let ranges = ranges_of(plan);
            if keep {
                save_ranges(&run.state_dir, &side, &plan.topic, &ranges)?;
            }
            Ok((ranges, false))
        }
    }
}

/// Runs the side replica until its ranges are done; returns the summary.
pub async fn run_side(
    kafka: &KafkaArgs,
    plan: &Plan,
    run: &SideRun,
    ranges: &[Range],
) -> Result<SideSummary, ReplayError> {
    let side = side_group(&plan.group, &run.id);
    let topic = plan.topic.clone();
    let total: i64 = ranges.iter().map(|r| (r.end - r.start).max(0)).sum();
    if total == 0 {
        return Ok(SideSummary {
            group: side,
            records: 0,
            ok: 0,
            dead_lettered: 0,
            took: Duration::ZERO,
        });
    }
    let Some((program, args)) = run.command.split_first() else {
        return Err(ReplayError::Task(
            "no stage command: give it after `--` (e.g. -- docflow-thumbnails --database-url ...)"
                .into(),
        ));
    };
    let port = free_port()?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .args(["--group", &side])
        .args(range_flags(&topic, ranges))
        .args(["--max-rate", &run.max_rate.to_string()])
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .kill_on_drop(true);
    if let Some(path) = &run.log {
        let file = std::fs::File::create(path)
            .map_err(|e| ReplayError::Task(format!("creating {}: {e}", path.display())))?;
        let err = file
            .try_clone()
            .map_err(|e| ReplayError::Task(format!("{}: {e}", path.display())))?;
        cmd.stdout(file).stderr(err);
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| ReplayError::Task(format!("starting {program}: {e}")))?;
    let bar = run.progress_bar.then(|| {
        let bar = indicatif::ProgressBar::new(u64::try_from(total).unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:40}] {pos}/{len} records ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(side.clone());
        bar
    });
    // One client of the side group reads its progress throughout.
    let client = Arc::new(broker::client(kafka, &side)?);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                if let Some(bar) = &bar {
                    let (c, t, r) = (client.clone(), topic.clone(), ranges.to_vec());
                    if let Ok(Ok(done)) = tokio::task::spawn_blocking(move || progress(&c, &t, &r)).await {
                        bar.set_position(u64::try_from(done).unwrap_or(0));
                    }
                }
            }
        }
    }
    .map_err(|e| ReplayError::Task(format!("waiting for {program}: {e}")))?;
    let (c, s, t, r) = (client, side.clone(), topic.clone(), ranges.to_vec());
    let (records, dead) = tokio::task::spawn_blocking(move || {
        Ok::<_, ReplayError>((progress(&c, &t, &r)?, dead_letters(&c, &s, &t)?))
    })
    .await
    .map_err(|e| ReplayError::Task(e.to_string()))??;
    if let Some(bar) = bar {
        bar.set_position(u64::try_from(records).unwrap_or(0));
        bar.finish();
    }
    let _ = std::io::stdout().flush();
    if !status.success() || records < total {
        return Err(ReplayError::Task(format!(
            "the side replica ({program}) stopped ({status}) after {records} of {total} records; \
             run the same command with --replay-id {} to resume",
            run.id
        )));
    }
    Ok(SideSummary {
        group: side,
        records,
        ok: records - dead,
        dead_lettered: dead,
        took: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_kept_for_a_resume_and_become_flags() {
        let dir = std::env::temp_dir().join(format!("side-{}", std::process::id()));
        let ranges = vec![
            Range {
                partition: 0,
                start: 5,
                end: 9,
            },
            Range {
                partition: 1,
                start: 7,
                end: 7,
            },
        ];
        save_ranges(&dir, "g.replay.x", "t", &ranges).unwrap();
        assert_eq!(
            load_ranges(&dir, "g.replay.x", "t").unwrap(),
            Some(ranges.clone())
        );
        assert!(load_ranges(&dir, "g.replay.y", "t").unwrap().is_none());
        assert!(load_ranges(&dir, "g.replay.x", "other").is_err());
        // An empty range needs no replica work.
        assert_eq!(range_flags("t", &ranges), vec!["--assign-range", "t:0:5-9"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
