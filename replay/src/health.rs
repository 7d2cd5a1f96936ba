//! A consumer group's health as Burrow judges it (linkedin/Burrow's caching evaluator):
//! not lag alone, but what a window of the group's committed offsets did.
//!
//! Per partition the window holds the last `intervals` commits seen, each with its offset,
//! when it was seen and the lag then (log end − offset), beside the log ends seen. The
//! partition's verdict, first rule that holds wins:
//!
//! * **OK** while the current lag is within `allowed_lag`;
//! * **STOP**: no commit for longer than the window spans (now − last commit > last −
//!   first), unless the consumer caught up with the log end within the window;
//! * **REWIND**: the committed offset went back in the window and has not caught up since;
//! * **STALL**: the offset did not move over the window while every sample had lag;
//! * **WARN**: every sample had lag and the lag never fell;
//! * else **OK**.
//!
//! The group is the worst of its partitions, with STOP, STALL and REWIND reported as
//! **ERR**; **NOTFOUND** when the group has never committed and has no members. Its
//! `complete` is the share of partitions whose window is full.
//!
//! Burrow reads every commit from `__consumer_offsets`; here the window is filled by
//! sampling the group (committed offset, log end, members) every interval
//! ([`Tracker::observe`]). A sample counts as a commit when the offset moved, or when the
//! group has members: a live consumer that cannot move its offset is what Burrow sees as a
//! consumer re-committing the same offset (STALL); a group without members adds nothing,
//! so its last commit ages (STOP).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

/// How groups are sampled and judged: flattened into ingest (its console's sampler) and
/// `docflow status`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// How often each group's committed offsets and log ends are sampled for its verdict.
    #[arg(
        long,
        env = "DOCFLOW_HEALTH_INTERVAL",
        default_value = "5s",
        value_parser = docflow_config::parse_duration
    )]
    pub health_interval: std::time::Duration,
    /// Commits a partition's window holds (Burrow's `intervals`): the verdict looks back
    /// this many samples. Make the window (interval × this) several times the stage's p99
    /// service time, or one slow document reads as a stall.
    #[arg(long, env = "DOCFLOW_HEALTH_WINDOW", default_value_t = 12)]
    pub health_window: usize,
    /// A lag up to this many records is no lag (Burrow's `allowed-lag`).
    #[arg(long, env = "DOCFLOW_HEALTH_ALLOWED_LAG", default_value_t = 0)]
    pub health_allowed_lag: u64,
}

impl HealthArgs {
    /// The evaluation's rules: a group watched for less than a window's time (interval ×
    /// window) is not judged on a window still filling.
    pub fn rules(&self) -> Rules {
        let window = self
            .health_interval
            .saturating_mul(u32::try_from(self.health_window).unwrap_or(u32::MAX));
        Rules {
            allowed_lag: self.health_allowed_lag,
            minimum_complete: 0.0,
            warm_up_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// A verdict, from good to bad (Burrow's numbers: what `docflow_consumer_status` exports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Status {
    /// The group is unknown: never committed, no members.
    #[serde(rename = "NOTFOUND")]
    NotFound,
    /// Consuming, or nothing to consume.
    #[serde(rename = "OK")]
    Ok,
    /// The lag did not fall over the window (the consumer may be too slow).
    #[serde(rename = "WARN")]
    Warn,
    /// A group with a stopped, stalled or rewound partition.
    #[serde(rename = "ERR")]
    Err,
    /// A partition whose commits stopped while it has lag.
    #[serde(rename = "STOP")]
    Stop,
    /// A partition whose offset does not move while it has lag.
    #[serde(rename = "STALL")]
    Stall,
    /// A partition whose offset went back and has not caught up.
    #[serde(rename = "REWIND")]
    Rewind,
}

impl Status {
    /// Its name, as Burrow writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::NotFound => "NOTFOUND",
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Err => "ERR",
            Status::Stop => "STOP",
            Status::Stall => "STALL",
            Status::Rewind => "REWIND",
        }
    }

    /// Burrow's number for it (0 NOTFOUND, 1 OK, 2 WARN, 3 ERR, 4 STOP, 5 STALL, 6 REWIND).
    pub fn level(self) -> u8 {
        self as u8
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One commit in a partition's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// The committed offset.
    pub offset: i64,
    /// When it was seen, ms since the epoch.
    pub at_ms: i64,
    /// Log end − offset when it was seen (`None`: not known).
    pub lag: Option<u64>,
}

/// The evaluation's settings (Burrow's `allowed-lag` and `minimum-complete`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// A lag up to this is no lag.
    pub allowed_lag: u64,
    /// A window less full than this (0..=1) is OK without evaluation.
    pub minimum_complete: f32,
    /// For this long after a group is first sampled, a partition whose window is not full
    /// is OK, "warming up": right after a start, one commit would read as stopped or
    /// stalled (Burrow reads the commits' history; a sampler starts from nothing).
    pub warm_up_ms: i64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            allowed_lag: 0,
            minimum_complete: 0.0,
            warm_up_ms: 0,
        }
    }
}

/// One partition's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionVerdict {
    /// The partition's topic (a group may read several).
    #[serde(default)]
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The verdict.
    pub status: Status,
    /// Why, in a sentence.
    pub reason: String,
    /// How full its window is (0..=1).
    pub complete: f32,
    /// The oldest commit in the window.
    pub start: Option<Sample>,
    /// The newest.
    pub end: Option<Sample>,
    /// Newest log end − newest commit.
    pub current_lag: u64,
}

/// A group's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupVerdict {
    /// The group.
    pub group: String,
    /// The verdict: NOTFOUND, OK, WARN or ERR.
    pub status: Status,
    /// Why, in a sentence (the worst partition's reason).
    pub reason: String,
    /// Share of its partitions whose window is full.
    pub complete: f32,
    /// The partitions' current lags, summed.
    pub total_lag: u64,
    /// The partition with the largest current lag.
    pub max_lag_partition: Option<i32>,
    /// Its topic.
    #[serde(default)]
    pub max_lag_topic: Option<String>,
    /// Every partition, by topic and number.
    pub partitions: Vec<PartitionVerdict>,
}

/// The verdict of a partition whose window is `window`: `slots` slots of which the newest
/// `window.len()` are filled, oldest first; `broker`: the log ends seen, oldest first;
/// `current_lag`: the newest log end − the newest commit; `now_ms`: now.
pub fn partition(
    number: i32,
    window: &[Sample],
    slots: usize,
    broker: &[i64],
    current_lag: u64,
    now_ms: i64,
    rules: Rules,
) -> PartitionVerdict {
    let mut verdict = PartitionVerdict {
        topic: String::new(),
        partition: number,
        status: Status::Ok,
        reason: String::new(),
        complete: 0.0,
        start: window.first().copied(),
        end: window.last().copied(),
        current_lag,
    };
    if window.is_empty() {
        "no commit seen yet".clone_into(&mut verdict.reason);
        return verdict;
    }
    #[allow(clippy::cast_precision_loss)]
    {
        verdict.complete = if window.len() < slots {
            window.len() as f32 / slots as f32
        } else {
            1.0
        };
    }
    if verdict.complete < rules.minimum_complete {
        verdict.reason = format!(
            "window {:.0} % full, under the {:.0} % it takes to judge",
            verdict.complete * 100.0,
            rules.minimum_complete * 100.0
        );
        return verdict;
    }
    let (status, reason) = status_of(window, broker, current_lag, now_ms, rules.allowed_lag);
    verdict.status = status;
    verdict.reason = reason;
    verdict
}

/// Burrow's rules over a non-empty window, in its order (STOP, REWIND, STALL, WARN).
pub fn status_of(
    window: &[Sample],
    broker: &[i64],
    current_lag: u64,
    now_ms: i64,
    allowed_lag: u64,
) -> (Status, String) {
    let (Some(first), Some(last)) = (window.first(), window.last()) else {
        return (Status::Ok, "no commit seen yet".into());
    };
    if current_lag <= allowed_lag {
        let reason = if current_lag == 0 {
            "no lag".to_owned()
        } else {
            format!("lag {current_lag}, within the {allowed_lag} allowed")
        };
        return (Status::Ok, reason);
    }
    if stopped(window, now_ms) && !recent_lag_zero(window, broker) {
        return (
            Status::Stop,
            format!(
                "no commit for {}, longer than the window's {}, with {current_lag} records behind",
                seconds(now_ms - last.at_ms),
                seconds(last.at_ms - first.at_ms)
            ),
        );
    }
    if let Some(r) = rewind(window)
        && !rewind_recovered(window, r)
    {
        return (
            Status::Rewind,
            format!(
                "the committed offset went back from {} to {} and has not caught up",
                window[r - 1].offset,
                window[r].offset
            ),
        );
    }
    if lag_always_not_zero(window, allowed_lag) {
        if stalled(window) {
            return (
                Status::Stall,
                format!(
                    "the committed offset stayed at {} over {} commits while {current_lag} records wait",
                    last.offset,
                    window.len()
                ),
            );
        }
        if lag_not_decreasing(window) {
            return (
                Status::Warn,
                format!(
                    "the lag did not fall over the window ({} to {current_lag} records)",
                    first.lag.map_or_else(|| "?".to_owned(), |l| l.to_string())
                ),
            );
        }
        return (
            Status::Ok,
            format!("lag {current_lag}, falling over the window"),
        );
    }
    (
        Status::Ok,
        format!("lag {current_lag}, but it was within {allowed_lag} in the window"),
    )
}

/// `ms` as seconds for reasons: tenths under 10 s, whole seconds above.
fn seconds(ms: i64) -> String {
    if ms.abs() < 10_000 {
        format!("{}.{} s", ms / 1000, (ms % 1000).abs() / 100)
    } else {
        format!("{} s", ms / 1000)
    }
}

/// No sample's lag is within `allowed_lag` (unknown lags are skipped).
pub fn lag_always_not_zero(window: &[Sample], allowed_lag: u64) -> bool {
    !window
        .iter()
        .any(|s| s.lag.is_some_and(|l| l <= allowed_lag))
}

/// Index of the first commit lower than the one before it.
pub fn rewind(window: &[Sample]) -> Option<usize> {
    (1..window.len()).find(|&i| window[i].offset < window[i - 1].offset)
}

/// Whether a commit from `r` on reached the offset before the rewind at `r`.
pub fn rewind_recovered(window: &[Sample], r: usize) -> bool {
    let before = window[r - 1].offset;
    window[r..].iter().any(|s| s.offset >= before)
}

/// Whether the last commit is older than the window is long.
pub fn stopped(window: &[Sample], now_ms: i64) -> bool {
    match (window.first(), window.last()) {
        (Some(first), Some(last)) => now_ms - last.at_ms > last.at_ms - first.at_ms,
        _ => false,
    }
}

/// Whether every commit in the window has the same offset.
pub fn stalled(window: &[Sample]) -> bool {
    window.windows(2).all(|p| p[0].offset == p[1].offset)
}

/// Whether the lag never fell from one known lag to the next.
pub fn lag_not_decreasing(window: &[Sample]) -> bool {
    let mut previous: Option<u64> = None;
    for lag in window.iter().filter_map(|s| s.lag) {
        if previous.is_some_and(|p| lag < p) {
            return false;
        }
        previous = Some(lag);
    }
    true
}

/// Whether some log end seen is at or under the last commit: the consumer was caught up.
pub fn recent_lag_zero(window: &[Sample], broker: &[i64]) -> bool {
    window
        .last()
        .is_some_and(|last| broker.iter().any(|&b| b <= last.offset))
}

/// The group's verdict from its partitions' (Burrow: the worst, STOP/STALL/REWIND as ERR;
/// `complete` the share of full windows).
pub fn group(group: &str, partitions: Vec<PartitionVerdict>) -> GroupVerdict {
    let mut status = Status::Ok;
    let mut worst: Option<&PartitionVerdict> = None;
    let mut max_lag: Option<&PartitionVerdict> = None;
    let mut full = 0usize;
    for p in &partitions {
        if p.status > status {
            status = p.status.min(Status::Err);
        }
        if p.status > worst.map_or(Status::Ok, |w| w.status) {
            worst = Some(p);
        }
        if max_lag.is_none_or(|m| p.current_lag > m.current_lag) {
            max_lag = Some(p);
        }
        if p.complete >= 1.0 {
            full += 1;
        }
    }
    let total_lag = partitions.iter().map(|p| p.current_lag).sum();
    // The topic is named when the group reads more than one.
    let topics = partitions
        .iter()
        .map(|p| p.topic.as_str())
        .collect::<std::collections::BTreeSet<_>>();
    let reason = match worst {
        Some(w) if topics.len() > 1 => format!(
            "{} partition {} {}: {}",
            w.topic, w.partition, w.status, w.reason
        ),
        Some(w) => format!("partition {} {}: {}", w.partition, w.status, w.reason),
        None if total_lag == 0 => "every partition OK, no lag".to_owned(),
        None => format!("every partition OK, lag {total_lag}"),
    };
    #[allow(clippy::cast_precision_loss)]
    let complete = if partitions.is_empty() {
        0.0
    } else {
        full as f32 / partitions.len() as f32
    };
    GroupVerdict {
        group: group.to_owned(),
        status,
        reason,
        complete,
        total_lag,
        max_lag_partition: max_lag.map(|m| m.partition),
        max_lag_topic: max_lag.map(|m| m.topic.clone()),
        partitions,
    }
}

/// One partition as sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The partition's topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset (`None`: nothing committed).
    pub committed: Option<i64>,
    /// The log start: where a partition the group has not committed yet is read from (the
    /// stages' `auto.offset.reset` is `earliest`).
    pub log_start: i64,
    /// The log end.
    pub log_end: i64,
}

#[derive(Debug, Default)]
struct PartitionWindow {
    commits: VecDeque<Sample>,
    broker: VecDeque<i64>,
    last: Option<i64>,
    current_lag: u64,
}

#[derive(Debug, Default)]
struct GroupWindow {
    /// By (topic, partition).
    partitions: BTreeMap<(String, i32), PartitionWindow>,
    /// When the group was first sampled.
    since_ms: i64,
}

/// The windows of the groups sampled, `intervals` commits a partition.
#[derive(Debug)]
pub struct Tracker {
    intervals: usize,
    groups: BTreeMap<String, GroupWindow>,
}

impl Tracker {
    /// Windows of `intervals` commits (at least 2).
    pub fn new(intervals: usize) -> Self {
        Tracker {
            intervals: intervals.max(2),
            groups: BTreeMap::new(),
        }
    }

    /// Commits a window holds.
    pub fn intervals(&self) -> usize {
        self.intervals
    }

    /// Adds one sample of `group` taken at `at_ms`: `live` when the group has members.
    /// A partition's commit enters its window when its offset moved or the group is live;
    /// the log end always enters the partition's log-end history. A group that has never
    /// committed and has no members stays unknown; once known, a partition it has not
    /// committed yet counts from its log start (Burrow, which reads only commits, would
    /// leave it out: its records would wait unseen).
    pub fn observe(&mut self, group: &str, at_ms: i64, live: bool, partitions: &[Observation]) {
        let known = self.groups.contains_key(group);
        if !known && !live && partitions.iter().all(|p| p.committed.is_none()) {
            return;
        }
        let intervals = self.intervals;
        let window = self
            .groups
            .entry(group.to_owned())
            .or_insert_with(|| GroupWindow {
                partitions: BTreeMap::new(),
                since_ms: at_ms,
            });
        window.partitions.retain(|(topic, p), _| {
            partitions
                .iter()
                .any(|o| o.partition == *p && o.topic == *topic)
        });
        for o in partitions {
            let w = window
                .partitions
                .entry((o.topic.clone(), o.partition))
                .or_default();
            push(&mut w.broker, o.log_end, intervals);
            // A commit retention passed reads from the log start, as the consumer will.
            let offset = o.committed.unwrap_or(o.log_start).max(o.log_start);
            let lag = u64::try_from(o.log_end - offset).unwrap_or(0);
            w.current_lag = lag;
            if live || w.last != Some(offset) {
                let sample = Sample {
                    offset,
                    at_ms,
                    lag: Some(lag),
                };
                push(&mut w.commits, sample, intervals);
            }
            w.last = Some(offset);
        }
    }

    /// The verdict of `group` at `now_ms`.
    pub fn verdict(&self, group: &str, now_ms: i64, rules: Rules) -> GroupVerdict {
        let Some(window) = self.groups.get(group) else {
            return GroupVerdict {
                group: group.to_owned(),
                status: Status::NotFound,
                reason: "the group has no commits and no members".to_owned(),
                complete: 1.0,
                total_lag: 0,
                max_lag_partition: None,
                max_lag_topic: None,
                partitions: Vec::new(),
            };
        };
        let warming = now_ms.saturating_sub(window.since_ms) < rules.warm_up_ms;
        let partitions = window
            .partitions
            .iter()
            .map(|((topic, number), w)| {
                let commits: Vec<Sample> = w.commits.iter().copied().collect();
                let broker: Vec<i64> = w.broker.iter().copied().collect();
                let mut p = partition(
                    *number,
                    &commits,
                    self.intervals,
                    &broker,
                    w.current_lag,
                    now_ms,
                    rules,
                );
                p.topic.clone_from(topic);
                if warming && p.complete < 1.0 && p.status != Status::Ok {
                    p.status = Status::Ok;
                    p.reason = format!(
                        "warming up: {} of {} commits in the window, lag {}",
                        commits.len(),
                        self.intervals,
                        w.current_lag
                    );
                }
                p
            })
            .collect();
        self::group(group, partitions)
    }
}

/// A consumer group as ingest's `--console-group` and `docflow status --group` name it:
/// `GROUP[=STAGE][@TOPIC[+TOPIC…]]` — the stage whose results it records (default: the
/// group's name) and the topics it reads (default: the caller's topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// The consumer group.
    pub group: String,
    /// The stage whose results it records.
    pub stage: String,
    /// The topics it reads, each once; never empty.
    pub topics: Vec<String>,
}

impl GroupSpec {
    /// Parses `spec`; `topic` when it names none.
    pub fn parse(spec: &str, topic: &str) -> Self {
        let (head, topics) = spec.split_once('@').unwrap_or((spec, ""));
        let mut topics: Vec<String> = topics
            .split('+')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if topics.is_empty() {
            topics.push(topic.to_owned());
        }
        // A topic named twice is read once (its lag counted once, its DLQ redriven once).
        let mut seen = std::collections::HashSet::new();
        topics.retain(|t| seen.insert(t.clone()));
        let (group, stage) = head.split_once('=').unwrap_or((head, head));
        GroupSpec {
            group: group.trim().to_owned(),
            stage: stage.trim().to_owned(),
            topics,
        }
    }

    /// The analytics rollup (`group`; `analytics-rollup` unless a harness renamed it), which
    /// reads uploads and the stages' results.
    pub fn analytics_rollup(group: &str, uploaded: &str, processed: &str) -> Self {
        GroupSpec {
            group: group.to_owned(),
            stage: docflow_store::analytics::LIVE_GROUP.to_owned(),
            topics: vec![uploaded.to_owned(), processed.to_owned()],
        }
    }
}

impl std::fmt::Display for GroupSpec {
    /// The spec [`GroupSpec::parse`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.group)?;
        if self.stage != self.group {
            write!(f, "={}", self.stage)?;
        }
        write!(f, "@{}", self.topics.join("+"))
    }
}

/// One sample of `group` on `topics`, read from the broker (blocking): whether the group has
/// members, and each partition's offsets ([`offsets`]), topic after topic.
pub fn read(
    c: &rdkafka::consumer::BaseConsumer,
    topics: &[String],
    group: &str,
) -> Result<(bool, Vec<Observation>), crate::ReplayError> {
    let mut out = Vec::new();
    for topic in topics {
        // A topic not created yet has no partitions to judge.
        match offsets(c, topic) {
            Ok(o) => out.extend(o),
            Err(crate::ReplayError::NoSuchTopic(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let live = !crate::broker::members(c, group)?.is_empty();
    Ok((live, out))
}

/// Each partition of `topic`: the client's group's committed offset, log start and end
/// (blocking).
pub fn offsets(
    c: &rdkafka::consumer::BaseConsumer,
    topic: &str,
) -> Result<Vec<Observation>, crate::ReplayError> {
    let ids = crate::broker::partitions(c, topic)?;
    let committed = crate::broker::committed(c, topic, &ids)?;
    let mut out = Vec::with_capacity(ids.len());
    for (&partition, committed) in ids.iter().zip(committed) {
        let (log_start, log_end) = crate::broker::watermarks(c, topic, partition)?;
        out.push(Observation {
            topic: topic.to_owned(),
            partition,
            committed,
            log_start,
            log_end,
        });
    }
    Ok(out)
}

fn push<T>(ring: &mut VecDeque<T>, value: T, capacity: usize) {
    if ring.len() == capacity {
        ring.pop_front();
    }
    ring.push_back(value);
}

#[cfg(test)]
mod tests;
