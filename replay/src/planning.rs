//! A [`Plan`]: per partition, the group's committed offset, the log and where a reset would
//! move it; read from the broker, a `--from-file` or a time, rendered as a table or CSV.

use std::path::PathBuf;
use std::time::Duration;

use crate::{PlanArgs, ReplayError, broker};

/// One partition of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionPlan {
    /// Partition.
    pub partition: i32,
    /// The group's committed offset (`None`: nothing committed).
    pub committed: Option<i64>,
    /// Log start.
    pub start: i64,
    /// Log end.
    pub end: i64,
    /// Where the group would start again.
    pub target: i64,
    /// The target asked for, when it lay outside [start, end] and was clamped.
    pub clamped_from: Option<i64>,
    /// Records from the target to the range end (`--to-offset` or the log end): the
    /// group's lag right after a reset, what it will process (again or for the first time).
    pub to_process: i64,
}

/// A plan for one group and topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Per partition.
    pub partitions: Vec<PartitionPlan>,
    /// The group has no committed offset on any partition planned and no member: it may
    /// not exist (a typo in `--group`).
    pub unknown_group: bool,
}

impl Plan {
    /// Records the group will process after the reset, all partitions together.
    pub fn total(&self) -> i64 {
        self.partitions.iter().map(|p| p.to_process).sum()
    }

    /// The plan as `topic,partition,offset` lines.
    pub fn csv(&self) -> String {
        self.partitions
            .iter()
            .map(|p| format!("{},{},{}\n", self.topic, p.partition, p.target))
            .collect()
    }

    /// The plan as a table, with the drain estimate at `rate` records/s.
    pub fn table(&self, rate: Option<f64>) -> String {
        let mut out = String::new();
        if self.unknown_group {
            out.push_str(&format!(
                "warning: group {} has no committed offset on {} and no member: it may not exist \
                 (check --group); a new group would start at the targets below\n",
                self.group, self.topic
            ));
        }
        out.push_str(&format!(
            "group {} on {}\n{:>9} {:>12} {:>12} {:>12} {:>12} {:>12}  note\n",
            self.group,
            self.topic,
            "partition",
            "committed",
            "log start",
            "log end",
            "target",
            "to process"
        ));
        for p in &self.partitions {
            let committed = p.committed.map_or("-".to_owned(), |c| c.to_string());
            let note = match (p.clamped_from, p.committed) {
                (Some(asked), _) => format!("asked {asked}, clamped to the log"),
                (None, Some(c)) if p.target > c => format!("skips {} records", p.target - c),
                _ => String::new(),
            };
            out.push_str(&format!(
                "{:>9} {:>12} {:>12} {:>12} {:>12} {:>12}  {note}\n",
                p.partition, committed, p.start, p.end, p.target, p.to_process
            ));
        }
        let total = self.total();
        out.push_str(&format!("total to process: {total} records"));
        match rate {
            Some(r) if r > 0.0 => {
                let secs = total as f64 / r;
                out.push_str(&format!(
                    "; at {r} records/s: about {}\n",
                    humantime::format_duration(Duration::from_secs(secs.ceil() as u64))
                ));
            }
            _ => out.push_str(" (give --rate for a drain estimate)\n"),
        }
        out
    }
}

/// Finds the first offset in [`start`, `end`) whose record's time is at or after `ts`
/// (`end` when none is), given the broker's `answer` and `read` (the first record at or
/// after an offset: its offset and time). The answer is used when it checks out; otherwise
/// a binary search over the partition finds it.
pub fn first_at_or_after(
    start: i64,
    end: i64,
    ts: i64,
    answer: Option<i64>,
    mut read: impl FnMut(i64) -> Result<Option<(i64, i64)>, ReplayError>,
) -> Result<i64, ReplayError> {
    // Whether the first record at or after `o` is at or after `ts` (none left: yes).
    let mut at_or_after =
        |o: i64| -> Result<bool, ReplayError> { Ok(read(o)?.is_none_or(|(_, t)| t >= ts)) };
    let candidate = answer.unwrap_or(end).clamp(start, end);
    // Verified: the record there is at or after ts (or it is the end), and the one before
    // it is earlier (or it is the start).
    let here_ok = candidate == end || at_or_after(candidate)?;
    let before_ok = candidate == start || !at_or_after(candidate - 1)?;
    if here_ok && before_ok {
        return Ok(candidate);
    }
    tracing::warn!(
        answer = ?answer,
        "the broker's offset for the time does not check out; searching the partition"
    );
    let (mut lo, mut hi) = (start, end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at_or_after(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

fn read_plan_file(path: &PathBuf, topic: &str) -> Result<Vec<(i32, i64)>, ReplayError> {
    let bad = |reason: String| ReplayError::PlanFile {
        path: path.clone(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        match fields.as_slice() {
            [t, p, o] if *t == topic => {
                let p: i32 = p
                    .parse()
                    .map_err(|_| bad(format!("line {}: partition", n + 1)))?;
                let o = o
                    .parse()
                    .map_err(|_| bad(format!("line {}: offset", n + 1)))?;
                if out.iter().any(|(q, _)| *q == p) {
                    return Err(bad(format!("line {}: partition {p} twice", n + 1)));
                }
                out.push((p, o));
            }
            [_, _, _] => {}
            _ => {
                return Err(bad(format!(
                    "line {}: expected topic,partition,offset",
                    n + 1
                )));
            }
        }
    }
    Ok(out)
}

/// Reads the broker and makes the plan (changes nothing).
pub async fn plan(args: PlanArgs) -> Result<Plan, ReplayError> {
    tokio::task::spawn_blocking(move || plan_blocking(&args))
        .await
        .map_err(|e| ReplayError::Task(e.to_string()))?
}

fn plan_blocking(args: &PlanArgs) -> Result<Plan, ReplayError> {
    let c = broker::client(&args.kafka, &args.group)?;
    let topic = args.topic.as_str();
    let mut partitions = broker::partitions(&c, topic)?;
    if let Some(p) = args.partition.iter().find(|p| !partitions.contains(p)) {
        return Err(ReplayError::NoSuchPartition {
            topic: topic.to_owned(),
            partition: *p,
            count: partitions.len(),
        });
    }
    if !args.partition.is_empty() {
        partitions.retain(|p| args.partition.contains(p));
    }
    let from_file = match &args.target.from_file {
        Some(path) => {
            let rows = read_plan_file(path, topic)?;
            if rows.is_empty() {
                return Err(ReplayError::PlanFile {
                    path: path.clone(),
                    reason: format!("no line for topic {topic}"),
                });
            }
            if let Some((p, _)) = rows.iter().find(|(p, _)| !partitions.contains(p)) {
                return Err(ReplayError::PlanFile {
                    path: path.clone(),
                    reason: format!("partition {p} is not a partition of {topic}"),
                });
            }
            // Like kafka-consumer-groups: only the partitions the file lists are reset.
            partitions.retain(|p| rows.iter().any(|(q, _)| q == p));
            Some(rows)
        }
        None => None,
    };
    let committed = broker::committed(&c, topic, &partitions)?;
    let since = match (args.target.from_timestamp, args.target.by_duration) {
        (Some(ts), _) => Some(ts),
        (None, Some(d)) => Some(
            docflow_runtime::metrics::now_ms() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        ),
        _ => None,
    };
    let mut out = Vec::new();
    for (&partition, committed) in partitions.iter().zip(committed) {
        let (start, end) = broker::watermarks(&c, topic, partition)?;
        let t = &args.target;
        let asked = if let Some(o) = t.from_offset {
            o
        } else if let Some(ts) = since {
            let answer = broker::offset_for_time(&c, topic, partition, ts)?;
            first_at_or_after(start, end, ts, answer, |o| {
                broker::record_at(&c, topic, partition, o)
            })?
        } else if let Some(k) = t.shift_by {
            committed.ok_or(ReplayError::NothingToShift(partition))? + k
        } else if t.to_earliest {
            start
        } else if t.to_latest {
            end
        } else if let Some((_, o)) = from_file
            .as_ref()
            .and_then(|f| f.iter().find(|(p, _)| *p == partition))
        {
            *o
        } else {
            committed.unwrap_or(end)
        };
        let target = asked.clamp(start, end);
        let range_end = args.to_offset.map_or(end, |m| m.clamp(start, end));
        out.push(PartitionPlan {
            partition,
            committed,
            start,
            end,
            target,
            clamped_from: (target != asked).then_some(asked),
            to_process: (range_end - target).max(0),
        });
    }
    let unknown_group =
        out.iter().all(|p| p.committed.is_none()) && broker::members(&c, &args.group)?.is_empty();
    Ok(Plan {
        group: args.group.clone(),
        topic: args.topic.clone(),
        partitions: out,
        unknown_group,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition with records at offsets 10..20, timestamps 1000 * offset.
    fn read(o: i64) -> Result<Option<(i64, i64)>, ReplayError> {
        Ok((o < 20).then(|| (o.max(10), 1000 * o.max(10))))
    }

    #[test]
    fn a_right_answer_is_kept_and_a_wrong_one_corrected() {
        // Right: 15 is the first record at or after 14,500.
        assert_eq!(
            first_at_or_after(10, 20, 14_500, Some(15), read).unwrap(),
            15
        );
        // Wrong answers (too late, too early, none) are corrected by the search.
        for wrong in [Some(18), Some(11), None, Some(99)] {
            assert_eq!(
                first_at_or_after(10, 20, 14_500, wrong, read).unwrap(),
                15,
                "{wrong:?}"
            );
        }
        // Every record is earlier: the end; every record later: the start.
        assert_eq!(first_at_or_after(10, 20, 99_000, None, read).unwrap(), 20);
        assert_eq!(first_at_or_after(10, 20, 0, Some(10), read).unwrap(), 10);
        assert_eq!(first_at_or_after(10, 20, 0, Some(13), read).unwrap(), 10);
    }

    #[test]
    fn plans_render_as_a_table_and_as_csv() {
        let plan = Plan {
            group: "g".into(),
            topic: "t".into(),
            partitions: vec![
                PartitionPlan {
                    partition: 0,
                    committed: Some(40),
                    start: 0,
                    end: 50,
                    target: 10,
                    clamped_from: None,
                    to_process: 40,
                },
                PartitionPlan {
                    partition: 1,
                    committed: None,
                    start: 5,
                    end: 8,
                    target: 5,
                    clamped_from: Some(0),
                    to_process: 3,
                },
            ],
            unknown_group: false,
        };
        assert_eq!(plan.csv(), "t,0,10\nt,1,5\n");
        let table = plan.table(Some(1.0));
        assert!(table.contains("asked 0, clamped to the log"), "{table}");
        assert!(
            table.contains("total to process: 43 records; at 1 records/s: about 43s"),
            "{table}"
        );
        assert!(!table.contains("warning"), "{table}");
        let unknown = Plan {
            unknown_group: true,
            ..plan
        };
        assert!(
            unknown
                .table(None)
                .starts_with("warning: group g has no committed offset on t and no member"),
            "{}",
            unknown.table(None)
        );
    }
}
