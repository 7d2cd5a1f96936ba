//! The operators' console: what it reads from the broker, and its page.
//!
//! Per watched consumer group: the committed offset, log start and end of every partition of
//! each topic it reads (lag in records; the analytics rollup reads two), the age of the
//! oldest record each partition still has to do (lag in seconds: the timestamp of the record
//! at the committed offset, read once per committed offset), the group's state and members
//! with their assignment (DescribeGroups, the consumer protocol's assignment decoded), the
//! depth of its dead-letter topics (one per topic it reads), and
//! what only the replicas know — which partitions they paused, records in flight — from the
//! reports they send to `--status-topic` (`docflow_runtime::status`).
//! Reads are blocking librdkafka calls on one client per group, never joining the group
//! (partitions are assigned for a read, nothing is committed).
//!
//! The page (`/console`, `console/` in this crate, embedded in the binary) is static: it
//! asks for the admin token and reads everything from `/v1/admin/...`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use docflow_config::KafkaArgs;
use docflow_replay::ReplayError;
use docflow_replay::broker;
use docflow_replay::health::{GroupSpec, HealthArgs, Rules, Tracker};
use docflow_runtime::Record;
use docflow_runtime::metrics::now_ms;
use docflow_runtime::status::ReplicaStatus;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;

/// How long one group description may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How far back the status topic is read per overview: a report older than three of its
/// intervals (15 s by default) is stale anyway; a minute leaves room for longer intervals.
const STATUS_LOOKBACK_MS: i64 = 60_000;

/// Most status reports read per overview (a minute of 300 replicas reporting every 5 s, or
/// fewer replicas that pause and resume often).
const STATUS_MAX: i64 = 5_000;

/// Most lag points kept per group: two hours at one a second (the page draws an hour at
/// most); a longer `--console-history` keeps this many, spread over it by the interval.
const MAX_HISTORY: usize = 7_200;

/// A consumer group the console shows, the stage whose results it records, and the topics
/// it reads (`--console-group GROUP[=STAGE][@TOPIC[+TOPIC…]]`).
pub(crate) type Watched = GroupSpec;

/// A topic's partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct TopicPartition {
    pub(crate) topic: String,
    pub(crate) partition: i32,
}

/// One partition as the group sees it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PartitionLag {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// The group's committed offset (`None`: nothing committed yet; it starts at the log
    /// start).
    pub(crate) committed: Option<i64>,
    pub(crate) log_start: i64,
    pub(crate) log_end: i64,
    /// Records from the committed offset (or the log start) to the log end.
    pub(crate) lag_records: i64,
    /// Age of the oldest record not yet committed, seconds (0 without lag).
    pub(crate) lag_seconds: f64,
    /// The member the partition is assigned to, if any.
    pub(crate) member: Option<String>,
    /// Whether the replica that has it paused it (at capacity), by its status reports.
    pub(crate) paused: bool,
}

impl PartitionLag {
    /// `topic/partition`: the partition's key in the lag history.
    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.topic, self.partition)
    }
}

/// One member of a group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Member {
    pub(crate) member_id: String,
    pub(crate) client_id: String,
    pub(crate) host: String,
    /// Partitions of the group's topics assigned to it.
    pub(crate) partitions: Vec<TopicPartition>,
}

/// What the broker says about one group.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GroupBroker {
    pub(crate) state: String,
    pub(crate) members: Vec<Member>,
    pub(crate) partitions: Vec<PartitionLag>,
    pub(crate) lag_records: i64,
    pub(crate) lag_seconds: f64,
    /// The group's dead-letter topics, one per topic it reads (those that exist).
    pub(crate) dlq_topics: Vec<String>,
    /// Records in the dead-letter topics (log end − log start, every partition).
    pub(crate) dlq_records: i64,
    /// Per partition of a dead-letter topic: (topic, partition, log start, log end).
    #[serde(skip)]
    pub(crate) dlq_partitions: Vec<(String, i32, i64, i64)>,
    /// The replicas' own reports (`--status-topic`): current ones only.
    pub(crate) replicas: Vec<ReplicaStatus>,
    /// Partitions (of any of its topics) paused by their replica.
    pub(crate) paused_partitions: usize,
}

impl GroupBroker {
    /// Adds the replicas' reports: which partitions are paused, and who has a partition
    /// where the broker did not say (a broker whose DescribeGroups leaves the assignment
    /// out, as the embedded Nisshi 0.8.1 does).
    pub(crate) fn with_replicas(mut self, replicas: Vec<ReplicaStatus>) -> Self {
        for p in &mut self.partitions {
            let has = |r: &&ReplicaStatus| {
                r.assigned
                    .iter()
                    .any(|a| a.topic == p.topic && a.partition == p.partition)
            };
            p.paused = replicas.iter().filter(has).any(|r| r.paused);
            if p.member.is_none()
                && let Some(r) = replicas.iter().find(has)
            {
                p.member = Some(format!("{} pid {} (its report)", r.host, r.pid));
            }
        }
        self.paused_partitions = self.partitions.iter().filter(|p| p.paused).count();
        self.replicas = replicas;
        self
    }
}

/// The console's view of the broker.
pub(crate) struct Console {
    pub(crate) groups: Vec<Watched>,
    kafka: KafkaArgs,
    pub(crate) topic: String,
    /// Where the replicas report their status (empty: nowhere).
    status_topic: String,
    /// One client per group (and one per group's DLQ, one for the status topic), created on
    /// first use; each used by one read at a time.
    clients: std::sync::Mutex<HashMap<String, Arc<std::sync::Mutex<BaseConsumer>>>>,
    /// One redrive per group at a time.
    redrives: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// Timestamp of the record at (group, topic, partition, offset): read once per committed
    /// offset.
    stamps: std::sync::Mutex<HashMap<(String, String, i32, i64), i64>>,
    /// The last overview and when it was made: browsers polling at once share one.
    pub(crate) last: tokio::sync::Mutex<Option<(std::time::Instant, serde_json::Value)>>,
    /// The groups' sampled windows, for their health verdicts (`crate::health`).
    pub(crate) health: std::sync::Mutex<Tracker>,
    /// The verdicts' rules.
    pub(crate) rules: Rules,
    /// How often the groups are sampled.
    pub(crate) health_interval: Duration,
    /// Each group's lag, a point per sample, the newest `history_len`.
    history: std::sync::Mutex<HashMap<String, VecDeque<LagPoint>>>,
    /// Points kept per group (`--console-history` / `--health-interval`).
    history_len: usize,
}

/// A group's lag at one sample: what the console's charts draw.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LagPoint {
    /// When, ms since the epoch.
    pub(crate) t: i64,
    /// Lag in records, every partition.
    pub(crate) total: i64,
    /// The oldest waiting record's age, seconds.
    pub(crate) seconds: f64,
    /// Per partition, keyed `topic/partition`: (lag in records, lag in seconds).
    pub(crate) parts: std::collections::BTreeMap<String, (i64, f64)>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("groups", &self.groups)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

/// Decodes a classic consumer protocol assignment (`ConsumerProtocolAssignment`, any
/// version: version i16, then [topic string, [partition i32]], then user data) into topic →
/// partitions. `None` for bytes that are not one.
pub(crate) fn decode_assignment(bytes: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
            let (head, rest) = self.0.split_first_chunk::<N>()?;
            self.0 = rest;
            Some(*head)
        }
        fn count(&mut self) -> Option<usize> {
            usize::try_from(i32::from_be_bytes(self.take::<4>()?)).ok()
        }
    }
    let mut r = Reader(bytes);
    let _version = i16::from_be_bytes(r.take::<2>()?);
    let topics = r.count()?;
    let mut out = Vec::new();
    for _ in 0..topics {
        let len = usize::try_from(i16::from_be_bytes(r.take::<2>()?)).ok()?;
        let name = r.0.get(..len)?;
        let name = std::str::from_utf8(name).ok()?.to_owned();
        r.0 = &r.0[len..];
        let n = r.count()?;
        // Each partition is 4 bytes: a count larger than what is left is not an assignment.
        if n > r.0.len() / 4 {
            return None;
        }
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push(i32::from_be_bytes(r.take::<4>()?));
        }
        out.push((name, partitions));
    }
    Some(out)
}

impl Console {
    /// A console over `groups` (`GROUP[=STAGE][@TOPIC[+TOPIC…]]` each; topics default to
    /// `topic`).
    pub(crate) fn new(
        groups: &[String],
        kafka: KafkaArgs,
        topic: String,
        status_topic: String,
        health: &HealthArgs,
        history: Duration,
    ) -> Self {
        let interval = health.health_interval.max(Duration::from_millis(1));
        let history_len =
            usize::try_from(history.as_millis() / interval.as_millis()).unwrap_or(usize::MAX);
        let groups: Vec<Watched> = groups
            .iter()
            .filter(|g| !g.trim().is_empty())
            .map(|g| Watched::parse(g, &topic))
            .collect();
        Console {
            redrives: groups
                .iter()
                .map(|w| (w.group.clone(), Arc::default()))
                .collect(),
            groups,
            kafka,
            topic,
            status_topic,
            clients: std::sync::Mutex::default(),
            stamps: std::sync::Mutex::default(),
            last: tokio::sync::Mutex::const_new(None),
            health: std::sync::Mutex::new(Tracker::new(health.health_window)),
            rules: health.rules(),
            health_interval: interval,
            history: std::sync::Mutex::default(),
            history_len: history_len.clamp(1, MAX_HISTORY),
        }
    }

    /// Keeps `broker`'s lag, read at `t`, as the newest point of `group`'s history.
    pub(crate) fn keep_lag(&self, group: &str, t: i64, broker: &GroupBroker) {
        let point = LagPoint {
            t,
            total: broker.lag_records,
            seconds: broker.lag_seconds,
            parts: broker
                .partitions
                .iter()
                .map(|p| (p.key(), (p.lag_records, p.lag_seconds)))
                .collect(),
        };
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        let points = history.entry(group.to_owned()).or_default();
        if points.len() >= self.history_len {
            points.pop_front();
        }
        points.push_back(point);
    }

    /// `group`'s lag points, oldest first.
    pub(crate) fn lag_history(&self, group: &str) -> Vec<LagPoint> {
        self.history
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(group)
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Points each group's history keeps.
    pub(crate) fn history_len(&self) -> usize {
        self.history_len
    }

    /// The watched group named `group`.
    pub(crate) fn watched(&self, group: &str) -> Option<&Watched> {
        self.groups.iter().find(|w| w.group == group)
    }

    /// Runs `f` with the client for `key` (acting for consumer group `group`).
    fn with_client<T>(
        &self,
        key: &str,
        group: &str,
        f: impl FnOnce(&BaseConsumer) -> Result<T, ReplayError>,
    ) -> Result<T, ReplayError> {
        let client = {
            // A read that panicked left nothing half-done in the map: keep using it.
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            match clients.get(key) {
                Some(c) => c.clone(),
                None => {
                    let c = Arc::new(std::sync::Mutex::new(broker::client_as(
                        &self.kafka,
                        group,
                        "docflow-console",
                    )?));
                    clients.insert(key.to_owned(), c.clone());
                    c
                }
            }
        };
        let c = client.lock().unwrap_or_else(|e| e.into_inner());
        f(&c)
    }

    /// The redrive lock of the watched group `group`.
    pub(crate) fn redrive_lock(&self, group: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.redrives.get(group).cloned()
    }

    /// The topics `group` reads (the console's topic for a group it does not watch).
    pub(crate) fn topics_of(&self, group: &str) -> Vec<String> {
        self.watched(group)
            .map_or_else(|| vec![self.topic.clone()], |w| w.topics.clone())
    }

    /// The broker's view of `group` (blocking): every partition of every topic it reads.
    pub(crate) fn group(&self, group: &str) -> Result<GroupBroker, ReplayError> {
        let topics = self.topics_of(group);
        self.with_client(group, group, |c| {
            let (state, members) = self.members(c, group, &topics)?;
            let now = now_ms();
            let mut partitions = Vec::new();
            let mut dlq_topics = Vec::new();
            let mut dlq_partitions = Vec::new();
            for topic in &topics {
                // A topic not created yet has no partitions to show (nor lag).
                let ids = match broker::partitions(c, topic) {
                    Ok(ids) => ids,
                    Err(ReplayError::NoSuchTopic(_)) => continue,
                    Err(e) => return Err(e),
                };
                let committed = broker::committed(c, topic, &ids)?;
                for (&p, committed) in ids.iter().zip(committed) {
                    let (start, end) = broker::watermarks(c, topic, p)?;
                    let from = committed.unwrap_or(start).max(start);
                    let lag = (end - from).max(0);
                    let lag_seconds = if lag > 0 {
                        // A record without a timestamp (or a negative one) has no age to show.
                        self.stamp(c, group, topic, p, from)?
                            .filter(|ts| *ts >= 0)
                            .map_or(0.0, |ts| ms_to_s(now.saturating_sub(ts)))
                    } else {
                        0.0
                    };
                    let member = members
                        .iter()
                        .find(|m| {
                            m.partitions
                                .iter()
                                .any(|a| a.topic == *topic && a.partition == p)
                        })
                        .map(|m| format!("{}@{} ({})", m.client_id, m.host, m.member_id));
                    partitions.push(PartitionLag {
                        topic: topic.clone(),
                        partition: p,
                        committed,
                        log_start: start,
                        log_end: end,
                        lag_records: lag,
                        lag_seconds,
                        member,
                        paused: false,
                    });
                }
                let dlq_topic = docflow_events::topics::dead_letter(topic, group);
                match broker::partitions(c, &dlq_topic) {
                    Ok(ids) => {
                        for p in ids {
                            let (start, end) = broker::watermarks(c, &dlq_topic, p)?;
                            dlq_partitions.push((dlq_topic.clone(), p, start, end));
                        }
                        dlq_topics.push(dlq_topic);
                    }
                    Err(ReplayError::NoSuchTopic(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(GroupBroker {
                state,
                members,
                lag_records: partitions.iter().map(|p| p.lag_records).sum(),
                lag_seconds: partitions.iter().map(|p| p.lag_seconds).fold(0.0, f64::max),
                partitions,
                dlq_topics,
                dlq_records: dlq_partitions
                    .iter()
                    .map(|(_, _, s, e)| (e - s).max(0))
                    .sum(),
                dlq_partitions,
                replicas: Vec::new(),
                paused_partitions: 0,
            })
        })
    }

    /// The group's state and members, with their partitions of `topics`.
    fn members(
        &self,
        c: &BaseConsumer,
        group: &str,
        topics: &[String],
    ) -> Result<(String, Vec<Member>), ReplayError> {
        let list =
            c.fetch_group_list(Some(group), TIMEOUT)
                .map_err(|source| ReplayError::Kafka {
                    context: "describing the group",
                    source,
                })?;
        let Some(g) = list.groups().iter().find(|g| g.name() == group) else {
            return Ok(("Dead".to_owned(), Vec::new()));
        };
        let mut members: Vec<Member> = g
            .members()
            .iter()
            .map(|m| Member {
                member_id: m.id().to_owned(),
                client_id: m.client_id().to_owned(),
                host: m.client_host().to_owned(),
                partitions: m
                    .assignment()
                    .and_then(decode_assignment)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(t, _)| topics.contains(t))
                    .flat_map(|(topic, ps)| {
                        ps.into_iter().map(move |partition| TopicPartition {
                            topic: topic.clone(),
                            partition,
                        })
                    })
                    .collect(),
            })
            .collect();
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        for m in &mut members {
            m.partitions.sort_unstable();
        }
        Ok((g.state().to_owned(), members))
    }

    /// Timestamp (Unix ms) of the first record at or after `offset` in partition `p` of
    /// `topic`, read from the broker once per (group, topic, partition, offset).
    fn stamp(
        &self,
        c: &BaseConsumer,
        group: &str,
        topic: &str,
        p: i32,
        offset: i64,
    ) -> Result<Option<i64>, ReplayError> {
        let key = (group.to_owned(), topic.to_owned(), p, offset);
        if let Some(ts) = self
            .stamps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
        {
            return Ok(Some(ts));
        }
        let Some((_, ts)) = broker::record_at(c, topic, p, offset)? else {
            return Ok(None);
        };
        let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        // Keep only the newest offset per (group, topic, partition).
        stamps.retain(|(g, t, q, _), _| !(g == group && t == topic && *q == p));
        stamps.insert(key, ts);
        Ok(Some(ts))
    }

    /// The current report of every replica, by group (blocking): the newest of each
    /// instance among the status topic's records of the last [`STATUS_LOOKBACK_MS`], if
    /// still current.
    pub(crate) fn replicas(&self) -> Result<HashMap<String, Vec<ReplicaStatus>>, ReplayError> {
        if self.status_topic.is_empty() {
            return Ok(HashMap::new());
        }
        let since = now_ms() - STATUS_LOOKBACK_MS;
        let records = self.with_client("status", "docflow-console", |c| {
            // From the first report of the last minute (none that recent: nothing), and never
            // more than STATUS_MAX records back.
            broker::read_to_end(
                c,
                &self.status_topic,
                |p, _, end| {
                    let first = broker::offset_for_time(c, &self.status_topic, p, since)?;
                    Ok(first.unwrap_or(end).max(end - STATUS_MAX))
                },
                TIMEOUT,
            )
        })?;
        let mut newest: HashMap<String, ReplicaStatus> = HashMap::new();
        for r in records {
            // Someone else's record on the topic is not a report: skipped.
            let Some(s) = r
                .payload
                .as_deref()
                .and_then(|p| serde_json::from_slice::<ReplicaStatus>(p).ok())
            else {
                continue;
            };
            if newest
                .get(&s.instance)
                .is_none_or(|old| old.at_ms <= s.at_ms)
            {
                newest.insert(s.instance.clone(), s);
            }
        }
        let now = now_ms();
        let mut by_group: HashMap<String, Vec<ReplicaStatus>> = HashMap::new();
        for s in newest.into_values().filter(|s| s.is_current(now)) {
            by_group.entry(s.group.clone()).or_default().push(s);
        }
        for replicas in by_group.values_mut() {
            replicas
                .sort_by(|a, b| (&a.host, a.pid, &a.instance).cmp(&(&b.host, b.pid, &b.instance)));
        }
        Ok(by_group)
    }

    /// The newest `n` dead letters of each partition of each of `group`'s DLQs, one per
    /// topic it reads (blocking).
    pub(crate) fn dead_letters(&self, group: &str, n: i64) -> Result<Vec<Record>, ReplayError> {
        let topics = self.topics_of(group);
        self.with_client(&format!("{group} dlq"), group, |c| {
            let mut out = Vec::new();
            for topic in &topics {
                let dlq = docflow_events::topics::dead_letter(topic, group);
                out.extend(broker::tail(c, &dlq, n)?);
            }
            Ok(out)
        })
    }

    /// Which of `group`'s dead-letter topics (only `dlq_topic` when given) still holds a
    /// record at `partition`/`offset` (blocking): its name, `None` when none does, or an
    /// error when more than one does and none was named.
    pub(crate) fn dead_letter_topic_with(
        &self,
        group: &str,
        dlq_topic: Option<&str>,
        partition: i32,
        offset: i64,
    ) -> Result<Option<String>, DeadLetterAt> {
        let candidates: Vec<String> = self
            .topics_of(group)
            .iter()
            .map(|t| docflow_events::topics::dead_letter(t, group))
            .filter(|d| dlq_topic.is_none_or(|named| named == d))
            .collect();
        if let Some(named) = dlq_topic
            && candidates.is_empty()
        {
            return Err(DeadLetterAt::NotTheGroups(named.to_owned()));
        }
        let holding = self
            .with_client(&format!("{group} dlq"), group, |c| {
                let mut holding = Vec::new();
                for topic in candidates {
                    let partitions = match broker::partitions(c, &topic) {
                        Ok(p) => p,
                        Err(ReplayError::NoSuchTopic(_)) => continue,
                        Err(e) => return Err(e),
                    };
                    if !partitions.contains(&partition) {
                        continue;
                    }
                    let (start, end) = broker::watermarks(c, &topic, partition)?;
                    if (start..end).contains(&offset) {
                        holding.push(topic);
                    }
                }
                Ok(holding)
            })
            .map_err(DeadLetterAt::Broker)?;
        match holding.len() {
            0 | 1 => Ok(holding.into_iter().next()),
            _ => Err(DeadLetterAt::Ambiguous(holding)),
        }
    }
}

/// Why a dead letter could not be found by its partition and offset.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeadLetterAt {
    /// The broker could not be read.
    #[error(transparent)]
    Broker(ReplayError),
    /// `?topic=` named a topic that is not one of the group's dead-letter topics.
    #[error("{0} is not one of the group's dead-letter topics")]
    NotTheGroups(String),
    /// Several of the group's dead-letter topics hold that partition and offset.
    #[error("more than one of the group's dead-letter topics holds that partition and offset ({}): name one with ?topic=", .0.join(", "))]
    Ambiguous(Vec<String>),
}

#[allow(clippy::cast_precision_loss)]
fn ms_to_s(ms: i64) -> f64 {
    ms.max(0) as f64 / 1000.0
}

/// The page and its assets, embedded: nothing is fetched from elsewhere.
pub(crate) mod assets {
    /// `/console`.
    pub(crate) const INDEX: &str = include_str!("../console/index.html");
    /// `/console/app.js`.
    pub(crate) const APP_JS: &str = include_str!("../console/app.js");
    /// `/console/app.css`.
    pub(crate) const APP_CSS: &str = include_str!("../console/app.css");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, &[i32])], user_data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&i32::try_from(topics.len()).unwrap().to_be_bytes());
        for (t, ps) in topics {
            b.extend_from_slice(&i16::try_from(t.len()).unwrap().to_be_bytes());
            b.extend_from_slice(t.as_bytes());
            b.extend_from_slice(&i32::try_from(ps.len()).unwrap().to_be_bytes());
            for p in *ps {
                b.extend_from_slice(&p.to_be_bytes());
            }
        }
        b.extend_from_slice(&i32::try_from(user_data.len()).unwrap().to_be_bytes());
        b.extend_from_slice(user_data);
        b
    }

    #[test]
    fn assignments_are_decoded_and_garbage_is_refused() {
        let bytes = assignment(&[("doc.uploaded", &[0, 2]), ("other", &[1])], b"ud");
        assert_eq!(
            decode_assignment(&bytes),
            Some(vec![
                ("doc.uploaded".to_owned(), vec![0, 2]),
                ("other".to_owned(), vec![1])
            ])
        );
        assert_eq!(decode_assignment(&assignment(&[], b"")), Some(vec![]));
        // Truncated inside the topics, or a count past the end: not an assignment, never a
        // panic (the user data after the topics is not read).
        let topics_end = bytes.len() - 4 - 2;
        for cut in 0..topics_end {
            assert_eq!(decode_assignment(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut huge = 1i16.to_be_bytes().to_vec();
        huge.extend_from_slice(&1i32.to_be_bytes());
        huge.extend_from_slice(&1i16.to_be_bytes());
        huge.push(b't');
        huge.extend_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(decode_assignment(&huge), None);
        assert_eq!(decode_assignment(&[0, 1, 0xff, 0xff, 0xff, 0xff]), None);
    }
}
