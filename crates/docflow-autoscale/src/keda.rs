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

use std::collections::{BTreeMap, HashMap};

/// Where a group without a commit starts (KEDA's `offsetResetPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetPolicy {
    /// From the log start: the whole log is lag.
    Earliest,
    /// From the log end: lag 1 (so a new group still gets a replica).
    Latest,
}

/// A `kafka` trigger's metadata, parsed and validated as KEDA does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTrigger {
    /// Brokers.
    pub bootstrap_servers: Vec<String>,
    /// Consumer group.
    pub consumer_group: String,
    /// Topic; `None`: every topic the group has commits on.
    pub topic: Option<String>,
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
            bootstrap_servers: vec!["localhost:9092".into()],
            consumer_group: consumer_group.into(),
            topic: Some(topic.into()),
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

    /// Parses trigger metadata (`resolved_env`: the scale target's container environment,
    /// for `...FromEnv` parameters). Errors are KEDA's texts, every problem reported.
    pub fn from_metadata(
        metadata: &BTreeMap<String, String>,
        resolved_env: &BTreeMap<String, String>,
    ) -> Result<Self, String> {
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
        let topic = from_env("topic");
        let int = |name: &str, default: i64, errors: &mut Vec<String>| {
            match get(name) {
            None => default,
            Some(v) => v.parse::<i64>().unwrap_or_else(|e| {
                errors.push(format!(
                    "unable to set param \"{name}\" value \"{v}\": unable to unmarshal to field type int64: {e}"
                ));
                default
            }),
        }
        };
        let lag_threshold = int("lagThreshold", 10, &mut errors);
        let activation_lag_threshold = int("activationLagThreshold", 0, &mut errors);
        let offset_reset_policy = match get("offsetResetPolicy").as_deref() {
            None | Some("latest") => ResetPolicy::Latest,
            Some("earliest") => ResetPolicy::Earliest,
            Some(other) => {
                errors.push(format!(
                    "parameter \"offsetResetPolicy\" value \"{other}\" must be one of [latest earliest]"
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
        let full_metadata = boolean("fullMetadata", true);
        // Validation, in KEDA's order; the first failure is reported with the field errors.
        let validation = (|| {
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
            let limitation = if topic.is_none() { None } else { limitation };
            if allow_idle_consumers && limit_to_partitions_with_lag {
                return Err(
                    "allowIdleConsumers and limitToPartitionsWithLag cannot be set simultaneously"
                        .to_owned(),
                );
            }
            if topic.is_none() && limit_to_partitions_with_lag {
                return Err(
                    "topic must be specified when using limitToPartitionsWithLag".to_owned(),
                );
            }
            if limit_to_partitions_with_lag && ensure_even {
                return Err("limitToPartitionsWithLag and ensureEvenDistributionOfPartitions cannot be set simultaneously".to_owned());
            }
            if topic.is_none() && ensure_even {
                return Err(
                    "topic must be specified when using ensureEvenDistributionOfPartitions"
                        .to_owned(),
                );
            }
            if !full_metadata && topic.is_none() {
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
        if let Some(v) = get("version")
            && !kafka_version_ok(&v)
        {
            return Err(format!(
                "error parsing kafka version: invalid version `{v}`"
            ));
        }
        Ok(KafkaTrigger {
            bootstrap_servers: bootstrap.split(',').map(|s| s.trim().to_owned()).collect(),
            consumer_group,
            topic,
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

/// The scaler's memory of committed offsets between polls (`excludePersistentLag`); a new
/// scaler (KEDA rebuilt it) starts empty.
#[derive(Debug, Clone, Default)]
pub struct PersistentLagMemory {
    previous: HashMap<(String, i32), i64>,
}

/// One partition's (lag, lag with persistent lag).
fn partition_lag(
    trigger: &KafkaTrigger,
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
        let key = (topic.to_owned(), p.partition);
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

/// The trigger's metric for `topics` (topic → its partitions' offsets). Without a topic in
/// the trigger, every topic where the group has a commit is read.
pub fn kafka_metric(
    trigger: &KafkaTrigger,
    topics: &BTreeMap<String, Vec<PartitionOffsets>>,
    memory: &mut PersistentLagMemory,
) -> KafkaMetric {
    let chosen: Vec<(&String, &Vec<PartitionOffsets>)> = match &trigger.topic {
        Some(t) => topics.iter().filter(|(name, _)| *name == t).collect(),
        None => topics
            .iter()
            .filter(|(_, ps)| ps.iter().any(|p| p.committed.is_some()))
            .collect(),
    };
    let (mut total, mut with_persistent, mut with_lag, mut count) = (0i64, 0i64, 0i64, 0i64);
    for (topic, parts) in chosen {
        for p in parts {
            if let Some(only) = &trigger.partition_limitation
                && !only.contains(&p.partition)
            {
                continue;
            }
            let (lag, lag_p) = partition_lag(trigger, topic, p, memory);
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

    /// KEDA's `parseKafkaMetadataTestDataset` (pkg/scalers/kafka_scaler_test.go, 38 rows):
    /// the metadata, whether KEDA accepts it, and what it parses to.
    #[test]
    fn keda_metadata_cases() {
        let cases: serde_cases::Cases =
            serde_cases::parse(include_str!("../tests/keda_metadata_cases.tsv"));
        assert_eq!(cases.len(), 38);
        for c in cases {
            let got = KafkaTrigger::from_metadata(&c.metadata, &BTreeMap::new());
            match (&got, c.error) {
                (Err(e), true) => assert!(e.starts_with("error parsing kafka"), "{}: {e}", c.line),
                (Ok(t), false) => {
                    assert_eq!(t.bootstrap_servers, c.brokers, "line {}", c.line);
                    assert_eq!(t.consumer_group, c.group, "line {}", c.line);
                    assert_eq!(
                        t.topic.clone().unwrap_or_default(),
                        c.topic,
                        "line {}",
                        c.line
                    );
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
            partition_lag(&t, "test-topic", &p(Some(100), 150), &mut mem),
            (50, 50)
        );
        t.offset_reset_policy = ResetPolicy::Latest;
        t.scale_to_zero_on_invalid_offset = true;
        assert_eq!(
            partition_lag(&t, "test-topic", &p(None, 150), &mut mem),
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
