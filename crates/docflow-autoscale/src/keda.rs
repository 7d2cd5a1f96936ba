//! KEDA's Kafka scaler as arithmetic: the trigger's metadata as KEDA parses and validates
//! it, and the metric and activity it reports for a consumer group's offsets.
//!
//! Per partition, the lag is the log end minus the group's committed offset. A partition
//! without a commit counts 1 under `offsetResetPolicy: latest` and its log end under
//! `earliest` (0 for both with `scaleToZeroOnInvalidOffset`). With
//! `excludePersistentLag`, a partition whose commit has not moved since the previous poll
//! drops out of the metric (it still counts for activation). Unless `allowIdleConsumers`
//! (or with `limitToPartitionsWithLag` / `ensureEvenDistributionOfPartitions`), the total
//! is capped at `lagThreshold × partitions` when `total / lagThreshold` — integer
//! division — exceeds the partitions (the partitions with lag under
//! `limitToPartitionsWithLag`); `ensureEvenDistributionOfPartitions` first rounds it up to
//! `f × lagThreshold`, f the smallest divisor of the partition count that covers it. The
//! trigger is active when the uncapped total (persistent lag included) exceeds
//! `activationLagThreshold`; a negative metric is reported as 0. The HPA gets the metric
//! with an `AverageValue` target of `lagThreshold`.
//!
//! Read from KEDA's `pkg/scalers/kafka_scaler.go` (v2.20); the tests replay the numbers of
//! KEDA's own scaler and e2e tests.
//!
//! KEDA's experimental `apache-kafka` scaler (`apache_kafka_scaler.go`, the kafka-go client)
//! computes the same lag, cap and activity, and differs where it picks partitions and parses
//! metadata: `topic` is a comma-separated list whose partitions are summed into one metric
//! (a listed topic that does not exist is skipped, not an error); without a topic it reads
//! every topic of the cluster (not only those the group committed on); no `version` or
//! `fullMetadata`, no rule against `limitToPartitionsWithLag` with
//! `ensureEvenDistributionOfPartitions` or against the latter without a topic, and its own
//! error texts ([`Scaler::ApacheKafka`]).

use std::collections::{BTreeMap, HashMap};

/// Where a group without a commit starts (KEDA's `offsetResetPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetPolicy {
    /// From the log start: the whole log is lag.
    Earliest,
    /// From the log end: lag 1 (so a new group still gets a replica).
    Latest,
}

/// Which of KEDA's Kafka scalers a trigger is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scaler {
    /// `type: kafka` (Sarama).
    Kafka,
    /// `type: apache-kafka` (kafka-go, experimental).
    ApacheKafka,
}

/// A `kafka` (or `apache-kafka`) trigger's metadata, parsed and validated as KEDA does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTrigger {
    /// Which scaler reads it.
    pub scaler: Scaler,
    /// Brokers.
    pub bootstrap_servers: Vec<String>,
    /// Consumer group.
    pub consumer_group: String,
    /// Topics (`kafka`: at most one). None: `kafka` reads every topic the group has commits
    /// on, `apache-kafka` every topic of the cluster.
    pub topics: Vec<String>,
    /// Only these partitions (ignored without a topic).
    pub partition_limitation: Option<Vec<i32>>,
    /// Target lag per replica.
    pub lag_threshold: i64,
    /// Lag above which the trigger is active.
    pub activation_lag_threshold: i64,
    /// Where a partition without a commit starts.
    pub offset_reset_policy: ResetPolicy,
    /// Replicas beyond the partition count allowed.
    pub allow_idle_consumers: bool,
    /// Leave out partitions whose commit does not move.
    pub exclude_persistent_lag: bool,
    /// A partition without a commit counts 0.
    pub scale_to_zero_on_invalid_offset: bool,
    /// Cap at the partitions with lag.
    pub limit_to_partitions_with_lag: bool,
    /// Round the metric up to a divisor of the partitions.
    pub ensure_even_distribution_of_partitions: bool,
}

impl KafkaTrigger {
    /// A trigger with KEDA's defaults for everything but the group and topic.
    pub fn new(consumer_group: &str, topic: &str, lag_threshold: i64) -> Self {
        KafkaTrigger {
            scaler: Scaler::Kafka,
            bootstrap_servers: vec!["localhost:9092".into()],
            consumer_group: consumer_group.into(),
            topics: vec![topic.into()],
            partition_limitation: None,
            lag_threshold,
            activation_lag_threshold: 0,
            offset_reset_policy: ResetPolicy::Latest,
            allow_idle_consumers: false,
            exclude_persistent_lag: false,
            scale_to_zero_on_invalid_offset: false,
            limit_to_partitions_with_lag: false,
            ensure_even_distribution_of_partitions: false,
        }
    }

    /// Parses a `kafka` trigger's metadata (`resolved_env`: the scale target's container
    /// environment, for `...FromEnv` parameters). Errors are KEDA's texts, every problem
    /// reported.
    pub fn from_metadata(
        metadata: &BTreeMap<String, String>,
        resolved_env: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        Self::parse(Scaler::Kafka, metadata, resolved_env)
    }

    /// Parses an `apache-kafka` trigger's metadata, as [`KafkaTrigger::from_metadata`].
    pub fn from_apache_metadata(
        metadata: &BTreeMap<String, String>,
        resolved_env: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        Self::parse(Scaler::ApacheKafka, metadata, resolved_env)
    }

    fn parse(
        scaler: Scaler,
        metadata: &BTreeMap<String, String>,
        resolved_env: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
        let apache = scaler == Scaler::ApacheKafka;
        // KEDA trims values and treats blank ones as absent.
        let get = |name: &str| -> Option<String> {
            metadata
                .get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let from_env = |name: &str| -> Option<String> {
            get(name).or_else(|| {
                get(&format!("{name}FromEnv"))
                    .and_then(|var| resolved_env.get(&var).map(|v| v.trim().to_owned()))
                    .filter(|v| !v.is_empty())
            })
        };
        let mut errors = Vec::new();
        let mut required = |name: &str| match from_env(name) {
            Some(v) => v,
            None => {
                errors.push(format!(
                    "missing required parameter \"{name}\" in [triggerMetadata resolvedEnv]"
                ));
                String::new()
            }
        };
        let bootstrap = required("bootstrapServers");
        let consumer_group = required("consumerGroup");
        // `kafka`: one topic; `apache-kafka`: a comma-separated list, each trimmed (empty
        // items kept, as KEDA keeps them).
        let topics: Vec<String> = match from_env("topic") {
            None => Vec::new(),
            Some(t) if apache => t.split(',').map(|x| x.trim().to_owned()).collect(),
            Some(t) => vec![t],
        };
        let no_topic = topics.is_empty();
        // An int as KEDA's typed config reads it (JSON); one that does not parse keeps Go's
        // zero value, not the default, so validation sees 0.
        let int = |name: &str, default: i64, errors: &mut Vec<String>| {
            match get(name) {
            None => default,
            Some(v) => go_json_int(&v).unwrap_or_else(|e| {
                errors.push(format!(
                    "unable to set param \"{name}\" value \"{v}\": unable to unmarshal to field type int64: {e}"
                ));
                0
            }),
        }
        };
        let lag_threshold = int("lagThreshold", 10, &mut errors);
        let activation_lag_threshold = int("activationLagThreshold", 0, &mut errors);
        let offset_reset_policy = match get("offsetResetPolicy").as_deref() {
            None | Some("latest") => ResetPolicy::Latest,
            Some("earliest") => ResetPolicy::Earliest,
            Some(other) => {
                // The enum's values in the order its tag lists them.
                let one_of = if apache {
                    "[earliest latest]"
                } else {
                    "[latest earliest]"
                };
                errors.push(format!(
                    "parameter \"offsetResetPolicy\" value \"{other}\" must be one of {one_of}"
                ));
                ResetPolicy::Latest
            }
        };
        let mut boolean = |name: &str, default: bool| match get(name) {
            None => default,
            Some(v) => match v.as_str() {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
                _ => {
                    errors.push(format!(
                        "unable to set param \"{name}\" value \"{v}\": unable to parse boolean value \"{v}\": strconv.ParseBool: parsing \"{v}\": invalid syntax"
                    ));
                    default
                }
            },
        };
        let allow_idle_consumers = boolean("allowIdleConsumers", false);
        let exclude_persistent_lag = boolean("excludePersistentLag", false);
        let scale_to_zero_on_invalid_offset = boolean("scaleToZeroOnInvalidOffset", false);
        let limit_to_partitions_with_lag = boolean("limitToPartitionsWithLag", false);
        let ensure_even = boolean("ensureEvenDistributionOfPartitions", false);
        // `apache-kafka` does not read `fullMetadata`.
        let full_metadata = apache || boolean("fullMetadata", true);
        // `apache-kafka`'s partitionLimitation is a field of its typed config (an error there
        // is a field error); `kafka` parses it in its validation.
        let apache_limitation = if apache {
            match get("partitionLimitation") {
                Some(text) => match parse_typed_int_list(&text) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        errors.push(format!(
                            "unable to set param \"partitionLimitation\" value \"{text}\": {e}"
                        ));
                        None
                    }
                },
                None => None,
            }
        } else {
            None
        };
        // Validation, in KEDA's order; the first failure is reported with the field errors.
        let validation = (|| {
            if apache {
                if lag_threshold <= 0 {
                    return Err("lagThreshold must be a positive number".to_owned());
                }
                if activation_lag_threshold < 0 {
                    // KEDA's text, though 0 is allowed.
                    return Err("activationLagThreshold must be a positive number".to_owned());
                }
                if allow_idle_consumers && limit_to_partitions_with_lag {
                    return Err("allowIdleConsumers and limitToPartitionsWithLag cannot be set simultaneously".to_owned());
                }
                if no_topic && limit_to_partitions_with_lag {
                    return Err(
                        "topic must be specified when using limitToPartitionsWithLag".to_owned(),
                    );
                }
                return Ok(if no_topic { None } else { apache_limitation });
            }
            if lag_threshold <= 0 {
                return Err("\"lagThreshold\" must be positive number".to_owned());
            }
            if activation_lag_threshold < 0 {
                return Err("\"activationLagThreshold\" must be a non-negative number".to_owned());
            }
            let limitation = match get("partitionLimitation") {
                Some(text) => Some(parse_partition_limitation(&text)?),
                None => None,
            };
            let limitation = if no_topic { None } else { limitation };
            if allow_idle_consumers && limit_to_partitions_with_lag {
                return Err(
                    "allowIdleConsumers and limitToPartitionsWithLag cannot be set simultaneously"
                        .to_owned(),
                );
            }
            if no_topic && limit_to_partitions_with_lag {
                return Err(
                    "topic must be specified when using limitToPartitionsWithLag".to_owned(),
                );
            }
            if limit_to_partitions_with_lag && ensure_even {
                return Err("limitToPartitionsWithLag and ensureEvenDistributionOfPartitions cannot be set simultaneously".to_owned());
            }
            if no_topic && ensure_even {
                return Err(
                    "topic must be specified when using ensureEvenDistributionOfPartitions"
                        .to_owned(),
                );
            }
            if !full_metadata && no_topic {
                return Err("topic must be specified when fullMetadata is false".to_owned());
            }
            Ok(limitation)
        })();
        let partition_limitation = match validation {
            Ok(l) => l,
            Err(e) => {
                errors.push(e);
                None
            }
        };
        if !errors.is_empty() {
            return Err(format!(
                "error parsing kafka metadata: {}",
                errors.join("\n")
            ));
        }
        // `apache-kafka` does not read `version`.
        if let Some(v) = get("version").filter(|_| !apache)
            && !kafka_version_ok(&v)
        {
            return Err(format!(
                "error parsing kafka version: invalid version `{v}`"
            ));
        }
        Ok(KafkaTrigger {
            scaler,
            bootstrap_servers: bootstrap.split(',').map(|s| s.trim().to_owned()).collect(),
            consumer_group,
            topics,
            partition_limitation,
            lag_threshold,
            activation_lag_threshold,
            offset_reset_policy,
            allow_idle_consumers,
            exclude_persistent_lag,
            scale_to_zero_on_invalid_offset,
            limit_to_partitions_with_lag,
            ensure_even_distribution_of_partitions: ensure_even,
        })
    }
}

/// Sarama's version strings: `a.b.c`, or `0.a.b.c`.
fn kafka_version_ok(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric && v.len() >= 5 && (parts.len() == 3 || (parts.len() == 4 && parts[0] == "0"))
}

/// An int as Go's `json.Unmarshal` reads one into an `int64`, with its error texts: no `+`,
/// no leading zero, no fraction or exponent.
fn go_json_int(v: &str) -> Result<i64, String> {
    let bytes = v.as_bytes();
    let quote = |b: u8| {
        if b == b'\'' {
            "'\\''".to_owned()
        } else {
            format!("'{}'", char::from(b))
        }
    };
    let Some(&first) = bytes.first() else {
        return Err("unexpected end of JSON input".to_owned());
    };
    if first != b'-' && !first.is_ascii_digit() {
        return Err(format!(
            "invalid character {} looking for beginning of value",
            quote(first)
        ));
    }
    // The number's extent: sign, integer part (a lone 0 or 1-9 then digits), fraction,
    // exponent; what follows is "after top-level value".
    let mut i = usize::from(first == b'-');
    match bytes.get(i) {
        None => return Err("unexpected end of JSON input".to_owned()),
        Some(b'0') => i += 1,
        Some(b) if b.is_ascii_digit() => {
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        Some(&b) => return Err(format!("invalid character {} in numeric literal", quote(b))),
    }
    let integer_end = i;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        match bytes.get(i) {
            Some(b) if b.is_ascii_digit() => {}
            Some(&b) => {
                return Err(format!(
                    "invalid character {} after decimal point in numeric literal",
                    quote(b)
                ));
            }
            None => return Err("unexpected end of JSON input".to_owned()),
        }
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        match bytes.get(i) {
            Some(b) if b.is_ascii_digit() => {}
            Some(&b) => {
                return Err(format!(
                    "invalid character {} in exponent of numeric literal",
                    quote(b)
                ));
            }
            None => return Err("unexpected end of JSON input".to_owned()),
        }
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if let Some(&b) = bytes.get(i) {
        return Err(format!(
            "invalid character {} after top-level value",
            quote(b)
        ));
    }
    if i != integer_end {
        return Err(format!(
            "json: cannot unmarshal number {v} into Go value of type int64"
        ));
    }
    v.parse::<i64>()
        .map_err(|_| format!("json: cannot unmarshal number {v} into Go value of type int64"))
}

/// `apache-kafka`'s `partitionLimitation` as KEDA's typed config reads an int list: items
/// split on `,` and trimmed, an item with `-` a range `start-end` (each side a JSON int; a
/// reversed range is empty), any other a JSON int; order and duplicates kept.
fn parse_typed_int_list(text: &str) -> Result<Vec<i32>, String> {
    let int = |v: &str| -> Result<i32, String> {
        let n = go_json_int(v.trim())?;
        i32::try_from(n)
            .map_err(|_| format!("json: cannot unmarshal number {v} into Go value of type int"))
    };
    let mut out = Vec::new();
    for (i, item) in text.split(',').map(str::trim).enumerate() {
        if item.contains('-') {
            let parts: Vec<&str> = item.split('-').collect();
            let [a, b] = parts[..] else {
                return Err(format!(
                    "slice element {i}: expected format start-end, got \"{item}\""
                ));
            };
            let a = int(a).map_err(|e| {
                format!(
                    "slice element {i}: unable to parse start value \"{}\": {e}",
                    a.trim()
                )
            })?;
            let b = int(b).map_err(|e| {
                format!(
                    "slice element {i}: unable to parse end value \"{}\": {e}",
                    b.trim()
                )
            })?;
            out.extend(a..=b);
        } else {
            out.push(int(item).map_err(|e| {
                format!("slice element {i}: unable to unmarshal to field type int: {e}")
            })?);
        }
    }
    Ok(out)
}

/// `partitionLimitation`: `1,2,3`, ranges `1-4`, mixed; order and duplicates kept.
pub fn parse_partition_limitation(text: &str) -> Result<Vec<i32>, String> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if item.contains('-') {
            let parts: Vec<&str> = item.split('-').collect();
            let [a, b] = parts[..] else {
                return Err(format!("invalid partition limitation range: {item}"));
            };
            let bad = || format!("invalid partition limitation: {item}");
            let a: i32 = a.trim().parse().map_err(|_| bad())?;
            let b: i32 = b.trim().parse().map_err(|_| bad())?;
            out.extend(a..=b);
        } else {
            out.push(
                item.parse()
                    .map_err(|_| format!("invalid partition limitation: {item}"))?,
            );
        }
    }
    Ok(out)
}

/// One partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// Partition id.
    pub partition: i32,
    /// The group's committed offset (`None`: nothing committed, KEDA's -1).
    pub committed: Option<i64>,
    /// Log end.
    pub latest: i64,
}

/// What a trigger reports in one poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaMetric {
    /// The metric the HPA sees (capped, shaped, never negative).
    pub metric: i64,
    /// Lag summed over the partitions counted in the metric, before the cap.
    pub total_lag: i64,
    /// Lag including persistent lag (what activation compares).
    pub total_lag_with_persistent: i64,
    /// Partitions with lag counted in the metric.
    pub partitions_with_lag: i64,
    /// Partitions considered.
    pub partitions: i64,
    /// Above `activationLagThreshold`.
    pub active: bool,
}

/// The scalers' memory of committed offsets between polls (`excludePersistentLag`), one per
/// trigger as KEDA keeps one per scaler; a new scaler (KEDA rebuilt it) starts empty.
#[derive(Debug, Clone, Default)]
pub struct PersistentLagMemory {
    /// By (trigger, topic, partition).
    previous: HashMap<(String, String, i32), i64>,
}

/// One partition's (lag, lag with persistent lag).
fn partition_lag(
    trigger: &KafkaTrigger,
    scope: &str,
    topic: &str,
    p: &PartitionOffsets,
    memory: &mut PersistentLagMemory,
) -> (i64, i64) {
    let Some(committed) = p.committed else {
        return match (
            trigger.offset_reset_policy,
            trigger.scale_to_zero_on_invalid_offset,
        ) {
            (_, true) => (0, 0),
            (ResetPolicy::Latest, false) => (1, 1),
            (ResetPolicy::Earliest, false) => (p.latest, p.latest),
        };
    };
    let lag = p.latest - committed;
    if trigger.exclude_persistent_lag {
        let key = (scope.to_owned(), topic.to_owned(), p.partition);
        match memory.previous.get(&key) {
            Some(prev) if *prev == committed => return (0, lag),
            _ => {
                memory.previous.insert(key, committed);
            }
        }
    }
    (lag, lag)
}

/// The smallest divisor `f` of `partitions` with `f × threshold ≥ lag` (else `partitions`).
pub fn next_factor(lag: i64, partitions: i64, threshold: i64) -> i64 {
    (1..=partitions)
        .filter(|f| partitions % f == 0)
        .find(|f| f * threshold >= lag)
        .unwrap_or(partitions)
}

/// The trigger's metric for `topics` (topic → its partitions' offsets), with the memory of
/// the trigger named "" ([`kafka_metric_of`]).
pub fn kafka_metric(
    trigger: &KafkaTrigger,
    topics: &BTreeMap<String, Vec<PartitionOffsets>>,
    memory: &mut PersistentLagMemory,
) -> KafkaMetric {
    kafka_metric_of(trigger, "", topics, memory)
}

/// The metric of trigger `name` for `topics` (topic → its partitions' offsets): its topics'
/// partitions summed. Without a topic in the trigger, `kafka` reads every topic where the
/// group has a commit, `apache-kafka` every topic given (the cluster's).
pub fn kafka_metric_of(
    trigger: &KafkaTrigger,
    name: &str,
    topics: &BTreeMap<String, Vec<PartitionOffsets>>,
    memory: &mut PersistentLagMemory,
) -> KafkaMetric {
    let chosen: Vec<(&String, &Vec<PartitionOffsets>)> = if !trigger.topics.is_empty() {
        topics
            .iter()
            .filter(|(t, _)| trigger.topics.contains(t))
            .collect()
    } else if trigger.scaler == Scaler::ApacheKafka {
        topics.iter().collect()
    } else {
        topics
            .iter()
            .filter(|(_, ps)| ps.iter().any(|p| p.committed.is_some()))
            .collect()
    };
    let (mut total, mut with_persistent, mut with_lag, mut count) = (0i64, 0i64, 0i64, 0i64);
    for (topic, parts) in chosen {
        for p in parts {
            if let Some(only) = &trigger.partition_limitation
                && !only.contains(&p.partition)
            {
                continue;
            }
            let (lag, lag_p) = partition_lag(trigger, name, topic, p, memory);
            total += lag;
            with_persistent += lag_p;
            if lag > 0 {
                with_lag += 1;
            }
            count += 1;
        }
    }
    let mut metric = total;
    let threshold = trigger.lag_threshold.max(1);
    if !trigger.allow_idle_consumers
        || trigger.limit_to_partitions_with_lag
        || trigger.ensure_even_distribution_of_partitions
    {
        let mut upper = count;
        if trigger.ensure_even_distribution_of_partitions {
            metric = next_factor(metric, count, threshold) * threshold;
        }
        if trigger.limit_to_partitions_with_lag {
            upper = with_lag;
        }
        if metric / threshold > upper {
            metric = upper * threshold;
        }
    }
    KafkaMetric {
        metric: metric.max(0),
        total_lag: total,
        total_lag_with_persistent: with_persistent,
        partitions_with_lag: with_lag,
        partitions: count,
        active: with_persistent > trigger.activation_lag_threshold,
    }
}

/// `topic` with partitions 0.. at the given (committed, latest) offsets (tests).
#[cfg(test)]
pub(crate) fn offsets_of(
    topic: &str,
    parts: &[(Option<i64>, i64)],
) -> BTreeMap<String, Vec<PartitionOffsets>> {
    let ps = parts
        .iter()
        .zip(0..)
        .map(|((c, l), partition)| PartitionOffsets {
            partition,
            committed: *c,
            latest: *l,
        })
        .collect();
    BTreeMap::from([(topic.to_owned(), ps)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Replays a table of KEDA's metadata cases through `scaler`'s parser: each row's
    /// verdict (an error starting `error_prefix`), and for the accepted ones every field.
    fn replay_metadata_cases(table: &str, rows: usize, scaler: Scaler, error_prefix: &str) {
        let cases: serde_cases::Cases = serde_cases::parse(table);
        assert_eq!(cases.len(), rows);
        for c in cases {
            let got = KafkaTrigger::parse(scaler, &c.metadata, &BTreeMap::new());
            match (&got, c.error) {
                (Err(e), true) => assert!(e.starts_with(error_prefix), "{}: {e}", c.line),
                (Ok(t), false) => {
                    assert_eq!(t.scaler, scaler, "line {}", c.line);
                    assert_eq!(t.bootstrap_servers, c.brokers, "line {}", c.line);
                    assert_eq!(t.consumer_group, c.group, "line {}", c.line);
                    assert_eq!(t.topics.join(","), c.topic, "line {}", c.line);
                    assert_eq!(t.partition_limitation, c.limitation, "line {}", c.line);
                    assert_eq!(
                        t.offset_reset_policy == ResetPolicy::Earliest,
                        c.earliest,
                        "line {}",
                        c.line
                    );
                    assert_eq!(t.allow_idle_consumers, c.idle, "line {}", c.line);
                    assert_eq!(t.exclude_persistent_lag, c.persistent, "line {}", c.line);
                    assert_eq!(
                        t.limit_to_partitions_with_lag, c.with_lag,
                        "line {}",
                        c.line
                    );
                    assert_eq!(
                        t.ensure_even_distribution_of_partitions, c.even,
                        "line {}",
                        c.line
                    );
                    assert_eq!(t.lag_threshold, c.lag_threshold, "line {}", c.line);
                }
                (got, want_error) => panic!(
                    "line {} ({}): got {got:?}, KEDA error: {want_error}",
                    c.line, c.comment
                ),
            }
        }
    }

    /// KEDA's `parseKafkaMetadataTestDataset` (pkg/scalers/kafka_scaler_test.go, 38 rows):
    /// the metadata, whether KEDA accepts it, and what it parses to.
    #[test]
    fn keda_metadata_cases() {
        replay_metadata_cases(
            include_str!("../tests/keda_metadata_cases.tsv"),
            38,
            Scaler::Kafka,
            "error parsing kafka",
        );
    }

    #[test]
    fn keda_error_texts() {
        let e = KafkaTrigger::from_metadata(&meta(&[]), &BTreeMap::new()).unwrap_err();
        assert_eq!(
            e,
            "error parsing kafka metadata: missing required parameter \"bootstrapServers\" in [triggerMetadata resolvedEnv]\nmissing required parameter \"consumerGroup\" in [triggerMetadata resolvedEnv]"
        );
        let base = [
            ("bootstrapServers", "b:9092"),
            ("consumerGroup", "g"),
            ("topic", "t"),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut m = meta(&base);
            m.extend(meta(extra));
            KafkaTrigger::from_metadata(&m, &BTreeMap::new())
        };
        assert_eq!(
            with(&[("lagThreshold", "0")]).unwrap_err(),
            "error parsing kafka metadata: \"lagThreshold\" must be positive number"
        );
        assert_eq!(
            with(&[
                ("allowIdleConsumers", "true"),
                ("limitToPartitionsWithLag", "true")
            ])
            .unwrap_err(),
            "error parsing kafka metadata: allowIdleConsumers and limitToPartitionsWithLag cannot be set simultaneously"
        );
        assert_eq!(
            with(&[("version", "1.2.3.4")]).unwrap_err(),
            "error parsing kafka version: invalid version `1.2.3.4`"
        );
        assert!(with(&[("version", "1.0.0")]).is_ok());
        // `...FromEnv` reads the scale target's environment.
        let m = meta(&[("bootstrapServersFromEnv", "KAFKA"), ("consumerGroup", "g")]);
        let env = meta(&[("KAFKA", "a:1, b:2")]);
        let t = KafkaTrigger::from_metadata(&m, &env).unwrap();
        assert_eq!(t.bootstrap_servers, vec!["a:1", "b:2"]);
    }

    /// KEDA's `parseApacheKafkaMetadataTestDataset` (apache_kafka_scaler_test.go, 30 rows),
    /// each row's verdict and parse as `apache-kafka` reads it.
    #[test]
    fn keda_apache_metadata_cases() {
        replay_metadata_cases(
            include_str!("../tests/keda_apache_metadata_cases.tsv"),
            30,
            Scaler::ApacheKafka,
            "error parsing kafka metadata: ",
        );
    }

    /// `apache-kafka`'s error texts (its typed config's and its `Validate`'s), and where it
    /// parts from `kafka`.
    #[test]
    fn keda_apache_error_texts() {
        let base = [
            ("bootstrapServers", "b:9092"),
            ("consumerGroup", "g"),
            ("topic", "t"),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut m = meta(&base);
            m.extend(meta(extra));
            KafkaTrigger::from_apache_metadata(&m, &BTreeMap::new())
        };
        let err = |extra: &[(&str, &str)]| {
            with(extra)
                .unwrap_err()
                .strip_prefix("error parsing kafka metadata: ")
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            err(&[("lagThreshold", "0")]),
            "lagThreshold must be a positive number"
        );
        assert_eq!(
            err(&[("activationLagThreshold", "-1")]),
            "activationLagThreshold must be a positive number"
        );
        // A malformed int keeps Go's zero: the validation adds its own line.
        assert_eq!(
            err(&[("lagThreshold", "+5")]),
            "unable to set param \"lagThreshold\" value \"+5\": unable to unmarshal to field type int64: invalid character '+' looking for beginning of value\nlagThreshold must be a positive number"
        );
        assert_eq!(
            err(&[("partitionLimitation", "a,b,c,d")]),
            "unable to set param \"partitionLimitation\" value \"a,b,c,d\": slice element 0: unable to unmarshal to field type int: invalid character 'a' looking for beginning of value"
        );
        assert_eq!(
            err(&[("partitionLimitation", "1-2-3")]),
            "unable to set param \"partitionLimitation\" value \"1-2-3\": slice element 0: expected format start-end, got \"1-2-3\""
        );
        assert_eq!(
            err(&[("offsetResetPolicy", "foo")]),
            "parameter \"offsetResetPolicy\" value \"foo\" must be one of [earliest latest]"
        );
        assert_eq!(
            err(&[("allowIdleConsumers", "notvalid")]),
            "unable to set param \"allowIdleConsumers\" value \"notvalid\": unable to parse boolean value \"notvalid\": strconv.ParseBool: parsing \"notvalid\": invalid syntax"
        );
        // Not read: `version`, `fullMetadata`; not refused: limit + even, even without a topic.
        assert!(with(&[("version", "1.2.3.4")]).is_ok());
        assert!(with(&[("fullMetadata", "maybe")]).is_ok());
        let t = with(&[
            ("limitToPartitionsWithLag", "true"),
            ("ensureEvenDistributionOfPartitions", "true"),
        ])
        .unwrap();
        assert!(t.limit_to_partitions_with_lag && t.ensure_even_distribution_of_partitions);
        // A reversed range is empty, duplicates stay; the topic list keeps empty items.
        assert_eq!(
            with(&[("partitionLimitation", "4-1, 2,2")])
                .unwrap()
                .partition_limitation,
            Some(vec![2, 2])
        );
        assert_eq!(with(&[("topic", "a,,b")]).unwrap().topics, ["a", "", "b"]);
        // `topicFromEnv`.
        let m = meta(&[
            ("bootstrapServers", "b:1"),
            ("consumerGroup", "g"),
            ("topicFromEnv", "TOPICS"),
        ]);
        let t = KafkaTrigger::from_apache_metadata(&m, &meta(&[("TOPICS", "x, y")])).unwrap();
        assert_eq!(t.topics, ["x", "y"]);
        // `kafka` reads `topic` as one name.
        let m = meta(&[
            ("bootstrapServers", "b:1"),
            ("consumerGroup", "g"),
            ("topic", "x,y"),
        ]);
        assert_eq!(
            KafkaTrigger::from_metadata(&m, &BTreeMap::new())
                .unwrap()
                .topics,
            ["x,y"]
        );
    }

    /// Ints as Go's `json.Unmarshal` reads them into an int64 (KEDA's typed config).
    #[test]
    fn ints_are_read_as_json() {
        for (text, want) in [("0", Ok(0)), ("10", Ok(10)), ("-3", Ok(-3))] {
            assert_eq!(go_json_int(text), want, "{text}");
        }
        for (text, want) in [
            ("+5", "invalid character '+' looking for beginning of value"),
            ("010", "invalid character '1' after top-level value"),
            (
                "1.0",
                "json: cannot unmarshal number 1.0 into Go value of type int64",
            ),
            (
                "1e1",
                "json: cannot unmarshal number 1e1 into Go value of type int64",
            ),
            (
                "abc",
                "invalid character 'a' looking for beginning of value",
            ),
            ("-", "unexpected end of JSON input"),
            ("-x", "invalid character 'x' in numeric literal"),
            ("12x", "invalid character 'x' after top-level value"),
            (
                "99999999999999999999",
                "json: cannot unmarshal number 99999999999999999999 into Go value of type int64",
            ),
        ] {
            assert_eq!(go_json_int(text), Err(want.to_owned()), "{text}");
        }
        // `kafka` reads its ints the same way: a malformed lagThreshold is 0 to validation.
        let m = meta(&[
            ("bootstrapServers", "b:1"),
            ("consumerGroup", "g"),
            ("topic", "t"),
            ("lagThreshold", "abc"),
        ]);
        assert_eq!(
            KafkaTrigger::from_metadata(&m, &BTreeMap::new()).unwrap_err(),
            "error parsing kafka metadata: unable to set param \"lagThreshold\" value \"abc\": unable to unmarshal to field type int64: invalid character 'a' looking for beginning of value\n\"lagThreshold\" must be positive number"
        );
    }

    /// KEDA's `TestKafkaParsePartitionLimitation`.
    #[test]
    fn partition_limitation_grammar() {
        for (text, want) in [
            ("1", vec![1]),
            ("1,2,3,4", vec![1, 2, 3, 4]),
            (" 1 , 2 , 3 ", vec![1, 2, 3]),
            ("1-4", vec![1, 2, 3, 4]),
            ("3-3", vec![3]),
            (" 1 - 4 ", vec![1, 2, 3, 4]),
            ("1-4,8,10-12", vec![1, 2, 3, 4, 8, 10, 11, 12]),
        ] {
            assert_eq!(parse_partition_limitation(text).unwrap(), want, "{text}");
        }
        assert_eq!(
            parse_partition_limitation("a,b,c").unwrap_err(),
            "invalid partition limitation: a"
        );
        assert_eq!(
            parse_partition_limitation("1-2-3").unwrap_err(),
            "invalid partition limitation range: 1-2-3"
        );
        assert!(parse_partition_limitation("a-3").is_err());
        assert!(parse_partition_limitation("1-b").is_err());
    }

    /// KEDA's `TestGetLagForPartition_MissingPartition` (present partitions) and
    /// `TestGetNextFactor`.
    #[test]
    fn keda_partition_lag_and_factor_cases() {
        let mut mem = PersistentLagMemory::default();
        let mut t = KafkaTrigger::new("test-group", "test-topic", 10);
        t.offset_reset_policy = ResetPolicy::Earliest;
        let p = |c, l| PartitionOffsets {
            partition: 0,
            committed: c,
            latest: l,
        };
        assert_eq!(
            partition_lag(&t, "", "test-topic", &p(Some(100), 150), &mut mem),
            (50, 50)
        );
        t.offset_reset_policy = ResetPolicy::Latest;
        t.scale_to_zero_on_invalid_offset = true;
        assert_eq!(
            partition_lag(&t, "", "test-topic", &p(None, 150), &mut mem),
            (0, 0)
        );
        for (lag, parts, threshold, want) in [
            (10, 100, 10, 1),
            (20, 100, 10, 2),
            (40, 100, 10, 4),
            (50, 100, 10, 5),
            (99, 100, 10, 10),
            (100, 100, 10, 10),
            (101, 100, 10, 20),
        ] {
            assert_eq!(
                next_factor(lag, parts, threshold),
                want,
                "({lag},{parts},{threshold})"
            );
        }
    }

    /// The metric side of KEDA's e2e scenarios (tests/scalers/kafka/kafka_test.go): the
    /// metric and activity at each step; the replicas are checked with the HPA in
    /// `explain`'s tests.
    #[test]
    fn keda_e2e_metrics() {
        let mut mem = PersistentLagMemory::default();
        // S1: earliest, never committed, 3 partitions, lagThreshold 1, activation 1.
        let mut t = KafkaTrigger::new("earliest", "kafka-topic", 1);
        t.activation_lag_threshold = 1;
        t.offset_reset_policy = ResetPolicy::Earliest;
        let m = |t: &KafkaTrigger, parts: &[(Option<i64>, i64)], mem: &mut PersistentLagMemory| {
            let r = kafka_metric(t, &offsets_of("kafka-topic", parts), mem);
            (r.metric, r.active)
        };
        assert_eq!(
            m(&t, &[(None, 0), (None, 0), (None, 0)], &mut mem),
            (0, false)
        );
        assert_eq!(
            m(&t, &[(None, 1), (None, 0), (None, 0)], &mut mem),
            (1, false)
        );
        assert_eq!(
            m(&t, &[(None, 1), (None, 1), (None, 0)], &mut mem),
            (2, true)
        );
        assert_eq!(
            m(&t, &[(None, 3), (None, 2), (None, 2)], &mut mem),
            (3, true),
            "7 capped at 3 partitions"
        );
        // S8: excludePersistentLag: the commit stopped moving, 5 records behind.
        let mut t = KafkaTrigger::new("persistentLag", "kafka-topic", 1);
        t.exclude_persistent_lag = true;
        let parts = [(Some(1), 3), (Some(0), 2), (Some(0), 1)];
        assert_eq!(
            m(&t, &parts, &mut mem),
            (3, true),
            "first sight: counted (5 capped to 3)"
        );
        let r = kafka_metric(&t, &offsets_of("kafka-topic", &parts), &mut mem);
        assert_eq!(
            (r.metric, r.active, r.total_lag_with_persistent),
            (0, true, 5)
        );
        // S9: limitToPartitionsWithLag, activation 1.
        let mut t = KafkaTrigger::new("latest", "kafka-topic", 1);
        t.limit_to_partitions_with_lag = true;
        t.activation_lag_threshold = 1;
        t.offset_reset_policy = ResetPolicy::Earliest;
        assert_eq!(m(&t, &[(Some(0), 0); 3], &mut mem), (0, false));
        assert_eq!(
            m(&t, &[(Some(0), 1), (Some(0), 0), (Some(0), 0)], &mut mem),
            (1, false)
        );
        assert_eq!(
            m(&t, &[(Some(0), 6), (Some(0), 0), (Some(0), 0)], &mut mem),
            (1, true)
        );
        assert_eq!(
            m(&t, &[(Some(0), 6), (Some(0), 5), (Some(0), 0)], &mut mem),
            (2, true)
        );
        // S10: ensureEvenDistributionOfPartitions over 10 partitions.
        let mut t = KafkaTrigger::new("latest", "kafka-topic", 1);
        t.ensure_even_distribution_of_partitions = true;
        t.activation_lag_threshold = 1;
        let ten = |lag: i64| {
            let mut v = vec![(Some(0), 0); 10];
            v[0] = (Some(0), lag);
            v
        };
        assert_eq!(m(&t, &ten(0), &mut mem), (1, false));
        assert_eq!(m(&t, &ten(1), &mut mem), (1, false));
        assert_eq!(m(&t, &ten(5), &mut mem), (5, true));
        assert_eq!(m(&t, &ten(8), &mut mem), (10, true));
        // S4–S7: no commit, one empty partition.
        let mut t = KafkaTrigger::new("g", "kafka-topic", 1);
        t.scale_to_zero_on_invalid_offset = true;
        assert_eq!(m(&t, &[(None, 0)], &mut mem), (0, false));
        t.scale_to_zero_on_invalid_offset = false;
        assert_eq!(m(&t, &[(None, 0)], &mut mem), (1, true), "latest: lag 1");
        t.offset_reset_policy = ResetPolicy::Earliest;
        assert_eq!(
            m(&t, &[(None, 2)], &mut mem),
            (1, true),
            "earliest: lag 2 capped at 1 partition"
        );
        // The integer-quotient cap: 35 / 10 = 3 is not above 3 partitions.
        let t = KafkaTrigger::new("g", "kafka-topic", 10);
        assert_eq!(
            m(&t, &[(Some(0), 35), (Some(0), 0), (Some(0), 0)], &mut mem),
            (35, true)
        );
        assert_eq!(
            m(&t, &[(Some(0), 40), (Some(0), 0), (Some(0), 0)], &mut mem),
            (30, true)
        );
        // A commit past the log end: negative lag reported as 0.
        assert_eq!(
            m(&t, &[(Some(30), 20), (Some(0), 5), (Some(0), 0)], &mut mem),
            (0, false)
        );
    }

    /// A tiny reader for the cases file (tab-separated; see its header).
    mod serde_cases {
        use std::collections::BTreeMap;

        pub(super) struct Case {
            pub line: u32,
            pub comment: String,
            pub metadata: BTreeMap<String, String>,
            pub error: bool,
            pub brokers: Vec<String>,
            pub group: String,
            pub topic: String,
            pub limitation: Option<Vec<i32>>,
            pub earliest: bool,
            pub idle: bool,
            pub persistent: bool,
            pub with_lag: bool,
            pub even: bool,
            pub lag_threshold: i64,
        }
        pub(super) type Cases = Vec<Case>;

        pub(super) fn parse(text: &str) -> Cases {
            let mut out = Vec::new();
            for row in text
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            {
                let f: Vec<&str> = row.split('\t').collect();
                assert_eq!(f.len(), 14, "{row}");
                let metadata = f[2]
                    .split(';')
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap();
                        (k.to_owned(), v.to_owned())
                    })
                    .collect();
                let b = |s: &str| s == "true";
                out.push(Case {
                    line: f[0].parse().unwrap(),
                    comment: f[1].to_owned(),
                    metadata,
                    error: b(f[3]),
                    brokers: f[4]
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    group: f[5].to_owned(),
                    topic: f[6].to_owned(),
                    limitation: (f[7] != "nil")
                        .then(|| f[7].split(',').map(|p| p.parse().unwrap()).collect()),
                    earliest: f[8] == "earliest",
                    idle: b(f[9]),
                    persistent: b(f[10]),
                    with_lag: b(f[11]),
                    even: b(f[12]),
                    lag_threshold: f[13].parse().unwrap(),
                });
            }
            out
        }
    }
}
