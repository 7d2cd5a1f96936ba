//! What a ScaledObject decides for given offsets and replicas: each trigger's metric and
//! activity ([`crate::keda`]), KEDA's own step (0 ↔ 1 by activity, respecting
//! `minReplicaCount`), and the HPA's desired replicas (the largest of the triggers'
//! `ceil(metric / target)` outside the tolerance, within min/max) and how far its rate
//! policies let one sync go.

use std::collections::BTreeMap;

use crate::hpa::{Hpa, HpaState};
use crate::keda::{KafkaTrigger, PartitionOffsets, PersistentLagMemory, Scaler, kafka_metric_of};

/// A trigger of a ScaledObject.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerKind {
    /// KEDA's Kafka scalers (`kafka`, `apache-kafka`).
    Kafka(KafkaTrigger),
    /// A scaler whose metric is given (Prometheus and the like): target per replica and
    /// activation threshold.
    Threshold {
        /// `threshold` (AverageValue target).
        threshold: f64,
        /// `activationThreshold`.
        activation: f64,
    },
}

/// A named trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// `name`, or `<type>-<index>`.
    pub name: String,
    /// What it is.
    pub kind: TriggerKind,
}

/// The parts of a ScaledObject that decide replicas.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledObject {
    /// `metadata.name`.
    pub name: String,
    /// `minReplicaCount` (KEDA's default 0).
    pub min_replica_count: u32,
    /// `maxReplicaCount` (KEDA's default 100).
    pub max_replica_count: u32,
    /// The HPA's behaviour (its target is per trigger; `target` is unused here).
    pub hpa: Hpa,
    /// Triggers.
    pub triggers: Vec<Trigger>,
}

/// One trigger's part.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerReport {
    /// Trigger name.
    pub name: String,
    /// The metric the HPA sees.
    pub metric: f64,
    /// Its target per replica.
    pub target: f64,
    /// Active.
    pub active: bool,
    /// Replicas it asks for.
    pub proposal: u32,
    /// How the metric came about.
    pub detail: String,
}

/// The decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Per trigger.
    pub triggers: Vec<TriggerReport>,
    /// Any trigger active.
    pub active: bool,
    /// Replicas the ScaledObject settles on for these figures (the HPA's desired count
    /// within min/max, or 0 when inactive with `minReplicaCount` 0).
    pub desired: u32,
    /// Where one sync from `current` goes under the rate policies (no history).
    pub next: u32,
    /// Why, in words.
    pub reason: String,
}

/// Kubernetes' HPA: the raw replicas a metric asks for with `current` replicas.
fn proposal(metric: f64, target: f64, current: u32, tolerance: f64) -> u32 {
    if current > 0 {
        let ratio = metric / (target * f64::from(current));
        if (ratio - 1.0).abs() <= tolerance {
            return current;
        }
    }
    (metric / target).ceil().max(0.0) as u32
}

/// Explains `so` for `offsets` (topic → partitions), the metrics of non-Kafka triggers
/// (by trigger name) and `current` replicas.
pub fn explain(
    so: &ScaledObject,
    offsets: &BTreeMap<String, Vec<PartitionOffsets>>,
    metrics: &BTreeMap<String, f64>,
    current: u32,
    memory: &mut PersistentLagMemory,
) -> Result<Explanation, String> {
    let mut reports = Vec::new();
    for t in &so.triggers {
        let (metric, target, active, detail) = match &t.kind {
            TriggerKind::Kafka(k) => {
                let m = kafka_metric_of(k, &t.name, offsets, memory);
                // `apache-kafka` skips a listed topic that does not exist (metric 0 when
                // none does); `kafka` fails the poll.
                if m.partitions == 0 && k.scaler == Scaler::Kafka {
                    return Err(format!(
                        "trigger {}: no partitions of {} in the offsets file",
                        t.name,
                        k.topics
                            .first()
                            .map_or("any topic the group committed on", String::as_str)
                    ));
                }
                let detail = format!(
                    "lag {} over {} partition{} ({} with lag{}); metric {} ({}); active: {} > activationLagThreshold {}",
                    m.total_lag,
                    m.partitions,
                    if m.partitions == 1 { "" } else { "s" },
                    m.partitions_with_lag,
                    if m.total_lag_with_persistent == m.total_lag {
                        String::new()
                    } else {
                        format!(", {} with persistent lag", m.total_lag_with_persistent)
                    },
                    m.metric,
                    if m.metric < m.total_lag {
                        format!(
                            "capped at lagThreshold {} × the partitions",
                            k.lag_threshold
                        )
                    } else if m.metric > m.total_lag && k.ensure_even_distribution_of_partitions {
                        if m.total_lag < 0 {
                            "a negative lag counts as 0, then rounded up to spread the partitions evenly"
                                .to_owned()
                        } else {
                            "rounded up to spread the partitions evenly".to_owned()
                        }
                    } else if m.metric > m.total_lag {
                        "a negative lag counts as 0".to_owned()
                    } else {
                        "uncapped".to_owned()
                    },
                    m.total_lag_with_persistent,
                    k.activation_lag_threshold
                );
                (m.metric as f64, k.lag_threshold as f64, m.active, detail)
            }
            TriggerKind::Threshold {
                threshold,
                activation,
            } => {
                let v = *metrics.get(&t.name).ok_or_else(|| {
                    format!(
                        "trigger {} needs its metric: --metric {}=VALUE",
                        t.name, t.name
                    )
                })?;
                (
                    v,
                    *threshold,
                    v > *activation,
                    format!("metric {v} (given); active: {v} > activationThreshold {activation}"),
                )
            }
        };
        reports.push(TriggerReport {
            name: t.name.clone(),
            metric,
            target,
            active,
            proposal: proposal(metric, target, current.max(1), so.hpa.tolerance),
            detail,
        });
    }
    let active = reports.iter().any(|r| r.active);
    let hpa_min = so.min_replica_count.max(1);
    let max = so.max_replica_count;
    if !active && so.min_replica_count == 0 {
        let reason = if current == 0 {
            "no trigger is active and minReplicaCount is 0: KEDA keeps it at 0".to_owned()
        } else {
            "no trigger is active and minReplicaCount is 0: KEDA scales it to 0 after cooldownPeriod".to_owned()
        };
        return Ok(Explanation {
            triggers: reports,
            active,
            desired: 0,
            next: 0,
            reason,
        });
    }
    // Active from zero: KEDA sets the floor, then the HPA decides from there.
    let from = if current == 0 { hpa_min } else { current };
    let raw = reports
        .iter()
        .map(|r| proposal(r.metric, r.target, from, so.hpa.tolerance))
        .max()
        .unwrap_or(hpa_min);
    let desired = raw.clamp(hpa_min, max.max(hpa_min));
    let hpa = Hpa {
        min_replicas: hpa_min,
        max_replicas: max.max(hpa_min),
        ..so.hpa.clone()
    };
    let next = HpaState::default().decide(&hpa, 0.0, raw, from);
    let mut reason = format!(
        "the HPA asks for {raw} (the largest trigger proposal), within [{hpa_min}, {max}]: {desired}"
    );
    if current == 0 {
        reason = format!("active: KEDA scales 0 → {hpa_min}; then {reason}");
    }
    if next != desired {
        reason.push_str(&format!(
            "; this sync's rate policies allow {from} → {next}, later syncs go on"
        ));
    }
    Ok(Explanation {
        triggers: reports,
        active,
        desired,
        next,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpa::{Policy, Rules};
    use crate::keda::{ResetPolicy, offsets_of};

    /// KEDA's e2e ScaledObjects: minReplicaCount 0, stabilisation 0, 100 %/15 s.
    fn e2e(trigger: KafkaTrigger) -> ScaledObject {
        let rules = |s| Rules {
            stabilization_s: s,
            policies: vec![Policy::Percent {
                value: 100,
                period_s: 15,
            }],
        };
        ScaledObject {
            name: "so".into(),
            min_replica_count: 0,
            max_replica_count: 100,
            hpa: Hpa {
                min_replicas: 1,
                max_replicas: 100,
                target: 1.0,
                tolerance: 0.1,
                up: rules(0),
                down: rules(0),
            },
            triggers: vec![Trigger {
                name: "kafka".into(),
                kind: TriggerKind::Kafka(trigger),
            }],
        }
    }

    /// Follows one KEDA e2e scenario: each step's offsets and the replicas KEDA's test
    /// asserts, feeding the settled count into the next step.
    /// One step: each partition's (committed, latest), and the replicas KEDA asserts.
    type Step<'a> = (&'a [(Option<i64>, i64)], u32);

    fn scenario(so: &ScaledObject, topic: &str, steps: &[Step<'_>]) {
        let mut mem = PersistentLagMemory::default();
        let mut replicas = 0;
        for (i, (parts, want)) in steps.iter().enumerate() {
            let e = explain(
                so,
                &offsets_of(topic, parts),
                &BTreeMap::new(),
                replicas,
                &mut mem,
            )
            .unwrap();
            assert_eq!(e.desired, *want, "step {}: {e:?}", i + 1);
            replicas = e.desired;
        }
    }

    /// tests/scalers/kafka/kafka_test.go, S1 (earliest) and S2 (latest, pre-committed):
    /// 0 and 1 records stay at 0 replicas (activation 1), 2 → 2, 7 → 3 (the partitions).
    #[test]
    fn keda_e2e_earliest_and_latest() {
        let mut t = KafkaTrigger::new("earliest", "kafka-topic", 1);
        t.activation_lag_threshold = 1;
        t.offset_reset_policy = ResetPolicy::Earliest;
        scenario(
            &e2e(t),
            "kafka-topic",
            &[
                (&[(None, 0), (None, 0), (None, 0)], 0),
                (&[(None, 1), (None, 0), (None, 0)], 0),
                (&[(None, 1), (None, 1), (None, 0)], 2),
                (&[(None, 3), (None, 2), (None, 2)], 3),
            ],
        );
        let mut t = KafkaTrigger::new("latest", "kafka-topic", 1);
        t.activation_lag_threshold = 1;
        scenario(
            &e2e(t),
            "kafka-topic",
            &[
                (&[(Some(7), 7), (Some(0), 0), (Some(0), 0)], 0),
                (&[(Some(7), 8), (Some(0), 0), (Some(0), 0)], 0),
                (&[(Some(7), 9), (Some(0), 0), (Some(0), 0)], 2),
                (&[(Some(7), 10), (Some(0), 2), (Some(0), 2)], 3),
            ],
        );
    }

    /// KEDA's multi-topic e2e topics, 3 partitions each: `a` records waiting on
    /// `kafka-topic`'s partition 0, `b` on `kafka-topic2`'s.
    fn two_topics(a: i64, b: i64) -> BTreeMap<String, Vec<PartitionOffsets>> {
        let mut m = offsets_of(
            "kafka-topic",
            &[(Some(7), 7 + a), (Some(0), 0), (Some(0), 0)],
        );
        m.extend(offsets_of(
            "kafka-topic2",
            &[(Some(0), b), (Some(0), 0), (Some(0), 0)],
        ));
        m
    }

    /// S3: no topic, the group's committed topics (2 × 3 partitions): 0 → 0, 1 → 1, 2 → 2.
    #[test]
    fn keda_e2e_multi_topic() {
        let mut t = KafkaTrigger::new("multiTopic", "x", 1);
        t.topics.clear();
        let so = e2e(t);
        let mut mem = PersistentLagMemory::default();
        let two = |a: i64, b: i64| {
            let mut m = two_topics(a, b);
            m.insert(
                "unrelated".into(),
                vec![PartitionOffsets {
                    partition: 0,
                    committed: None,
                    latest: 50,
                }],
            );
            m
        };
        let want = [((0, 0), 0), ((1, 0), 1), ((1, 1), 2)];
        let mut replicas = 0;
        for ((a, b), w) in want {
            let e = explain(&so, &two(a, b), &BTreeMap::new(), replicas, &mut mem).unwrap();
            assert_eq!(e.desired, w, "{e:?}");
            replicas = e.desired;
        }
    }

    /// `apache-kafka` (tests/scalers/apache_kafka): `topic: t1,t2` sums both topics into one
    /// metric — 1 record on t1 → 1 replica, then 1 on t2 → 2 — where the cap is the 6
    /// partitions of both. A listed topic the cluster lacks is skipped (no error, unlike
    /// `kafka`); none at all is metric 0, inactive.
    #[test]
    fn apache_kafka_sums_its_topic_list() {
        let mut m = BTreeMap::new();
        m.insert(
            "topic".to_owned(),
            "kafka-topic, kafka-topic2, not-there".to_owned(),
        );
        m.insert("bootstrapServers".to_owned(), "b:9092".to_owned());
        m.insert("consumerGroup".to_owned(), "multiTopic".to_owned());
        m.insert("lagThreshold".to_owned(), "1".to_owned());
        let t = KafkaTrigger::from_apache_metadata(&m, &BTreeMap::new()).unwrap();
        assert_eq!(t.topics, ["kafka-topic", "kafka-topic2", "not-there"]);
        let so = e2e(t);
        let mut mem = PersistentLagMemory::default();
        let two = |a: i64, b: i64| {
            let mut m = two_topics(a, b);
            m.extend(offsets_of("unlisted", &[(Some(0), 40)]));
            m
        };
        let mut replicas = 0;
        for ((a, b), want) in [((0, 0), 0), ((1, 0), 1), ((1, 1), 2), ((9, 9), 6)] {
            let e = explain(&so, &two(a, b), &BTreeMap::new(), replicas, &mut mem).unwrap();
            assert_eq!(e.desired, want, "{a} + {b}: {e:?}");
            replicas = e.desired;
        }
        // None of its topics exists: 0, inactive, no error.
        let e = explain(
            &so,
            &offsets_of("unlisted", &[(Some(0), 40)]),
            &BTreeMap::new(),
            2,
            &mut mem,
        )
        .unwrap();
        assert_eq!((e.triggers[0].metric, e.active, e.desired), (0.0, false, 0));
        // The same offsets for a `kafka` trigger on a missing topic fail the poll.
        let k = e2e(KafkaTrigger::new("g", "not-there", 1));
        assert!(
            explain(
                &k,
                &offsets_of("unlisted", &[(Some(0), 40)]),
                &BTreeMap::new(),
                0,
                &mut mem
            )
            .is_err()
        );
    }

    /// `apache-kafka` without a topic reads every topic given (the cluster's), not only
    /// those the group committed on: under `latest` each partition it never committed on
    /// counts 1, and raises the cap.
    #[test]
    fn apache_kafka_without_a_topic_reads_every_topic() {
        let mut t = KafkaTrigger::new("g", "x", 1);
        t.scaler = crate::keda::Scaler::ApacheKafka;
        t.topics.clear();
        let mut offsets = offsets_of("mine", &[(Some(5), 5)]);
        offsets.extend(offsets_of("others", &[(None, 100), (None, 100)]));
        let mut mem = PersistentLagMemory::default();
        let e = explain(&e2e(t.clone()), &offsets, &BTreeMap::new(), 0, &mut mem).unwrap();
        assert_eq!((e.triggers[0].metric, e.desired), (2.0, 2), "{e:?}");
        // `kafka` reads only the topic the group committed on: no lag.
        t.scaler = crate::keda::Scaler::Kafka;
        let e = explain(&e2e(t), &offsets, &BTreeMap::new(), 0, &mut mem).unwrap();
        assert_eq!((e.triggers[0].metric, e.desired), (0.0, 0), "{e:?}");
    }

    /// Two triggers on one topic with `excludePersistentLag` keep their own memories, as
    /// KEDA keeps one per scaler: the second does not see the first's commit as persistent.
    #[test]
    fn persistent_lag_is_remembered_per_trigger() {
        let mut t = KafkaTrigger::new("g", "t", 1);
        t.exclude_persistent_lag = true;
        t.allow_idle_consumers = true;
        let mut so = e2e(t.clone());
        so.triggers.push(Trigger {
            name: "again".into(),
            kind: TriggerKind::Kafka(t),
        });
        let mut mem = PersistentLagMemory::default();
        let offsets = offsets_of("t", &[(Some(0), 5)]);
        let e = explain(&so, &offsets, &BTreeMap::new(), 0, &mut mem).unwrap();
        assert_eq!(
            e.triggers.iter().map(|r| r.metric).collect::<Vec<_>>(),
            [5.0, 5.0],
            "the first poll counts the lag for each trigger"
        );
        let e = explain(&so, &offsets, &BTreeMap::new(), 5, &mut mem).unwrap();
        assert_eq!(
            e.triggers.iter().map(|r| r.metric).collect::<Vec<_>>(),
            [0.0, 0.0],
            "the commit did not move: persistent for each"
        );
    }

    /// S4–S7: one empty partition, no commit.
    #[test]
    fn keda_e2e_invalid_offsets() {
        let mut t = KafkaTrigger::new("g", "t", 1);
        t.scale_to_zero_on_invalid_offset = true;
        scenario(&e2e(t.clone()), "t", &[(&[(None, 0)], 0)]);
        t.offset_reset_policy = ResetPolicy::Earliest;
        scenario(&e2e(t.clone()), "t", &[(&[(None, 0)], 0)]);
        // S6: latest, no zeroing: 1 replica; committed and caught up: back to 0.
        t.scale_to_zero_on_invalid_offset = false;
        t.offset_reset_policy = ResetPolicy::Latest;
        scenario(
            &e2e(t.clone()),
            "t",
            &[(&[(None, 0)], 1), (&[(Some(1), 1)], 0)],
        );
        // S7: earliest over 2 records: lag 2 capped at 1 partition → 1; caught up → 0.
        t.offset_reset_policy = ResetPolicy::Earliest;
        scenario(&e2e(t), "t", &[(&[(None, 2)], 1), (&[(Some(3), 3)], 0)]);
    }

    /// S8: excludePersistentLag: 1 record → 1 replica, consumed → 0; the group stops
    /// committing and 5 more arrive: 1 replica (active by the persistent lag, metric 0),
    /// not 3, and it stays there.
    #[test]
    fn keda_e2e_persistent_lag() {
        let mut t = KafkaTrigger::new("persistentLag", "t", 1);
        t.exclude_persistent_lag = true;
        scenario(
            &e2e(t),
            "t",
            &[
                (&[(Some(0), 1), (Some(0), 0), (Some(0), 0)], 1),
                (&[(Some(1), 1), (Some(0), 0), (Some(0), 0)], 0),
                // The scaler polled these commits before: none moved, so the 5 records are
                // persistent lag — active (1 replica), metric 0 (not 3).
                (&[(Some(1), 3), (Some(0), 2), (Some(0), 1)], 1),
                (&[(Some(1), 3), (Some(0), 2), (Some(0), 1)], 1),
            ],
        );
    }

    /// S9 and S10.
    #[test]
    fn keda_e2e_partitions_with_lag_and_even_distribution() {
        let mut t = KafkaTrigger::new("latest", "t", 1);
        t.activation_lag_threshold = 1;
        t.offset_reset_policy = ResetPolicy::Earliest;
        t.limit_to_partitions_with_lag = true;
        scenario(
            &e2e(t),
            "t",
            &[
                (&[(Some(0), 0), (Some(0), 0), (Some(0), 0)], 0),
                (&[(Some(0), 1), (Some(0), 0), (Some(0), 0)], 0),
                (&[(Some(0), 6), (Some(0), 0), (Some(0), 0)], 1),
                (&[(Some(0), 6), (Some(0), 5), (Some(0), 0)], 2),
            ],
        );
        let mut t = KafkaTrigger::new("latest", "t", 1);
        t.activation_lag_threshold = 1;
        t.offset_reset_policy = ResetPolicy::Earliest;
        t.ensure_even_distribution_of_partitions = true;
        let ten = |lag: i64| {
            let mut v = vec![(Some(0), 0); 10];
            v[0] = (Some(0), lag);
            v
        };
        let (a, b, c, d) = (ten(0), ten(1), ten(5), ten(8));
        scenario(&e2e(t), "t", &[(&a, 0), (&b, 0), (&c, 5), (&d, 10)]);
    }

    #[test]
    fn the_rate_trigger_and_the_policies() {
        let mut so = e2e(KafkaTrigger::new("g", "t", 5));
        so.min_replica_count = 4;
        so.max_replica_count = 12;
        so.hpa = Hpa::seed(4, 12, 5.0);
        so.triggers.push(Trigger {
            name: "upload-rate".into(),
            kind: TriggerKind::Threshold {
                threshold: 20.0,
                activation: 0.0,
            },
        });
        let lag = offsets_of("t", &[(Some(0), 2); 12]);
        let rate = BTreeMap::from([("upload-rate".to_owned(), 200.0)]);
        let mut mem = PersistentLagMemory::default();
        let e = explain(&so, &lag, &rate, 4, &mut mem).unwrap();
        // Lag 24 asks for 5; 200 records/s at 20 per replica asks for 10; +100 % per 60 s
        // lets this sync reach 8.
        assert_eq!(e.triggers[0].proposal, 5);
        assert_eq!(e.triggers[1].proposal, 10);
        assert_eq!((e.desired, e.next), (10, 8));
        let err = explain(&so, &lag, &BTreeMap::new(), 4, &mut mem).unwrap_err();
        assert!(err.contains("--metric upload-rate="), "{err}");
    }
}
