//! KEDA's Kafka scaler and the Horizontal Pod Autoscaler, as arithmetic.
//!
//! KEDA reports, for a consumer group on a topic, the total lag: each partition's latest
//! offset minus the group's committed offset; a partition with no commit counts 1 under
//! `offsetResetPolicy: latest` (so a new group still gets a replica) and its latest offset
//! under `earliest`, both 0 with `scaleToZeroOnInvalidOffset`. Unless `allowIdleConsumers`,
//! the total is capped to `lagThreshold × partitions` when `total / lagThreshold` (integer
//! division) exceeds the partitions — or the partitions with lag, with
//! `limitToPartitionsWithLag`; the group is active when the total exceeds
//! `activationLagThreshold`. The HPA turns the
//! metric (target type `AverageValue` = `lagThreshold`) into
//! `desired = ceil(metric / lagThreshold)` unless `metric / (lagThreshold × current)` is
//! within the 10 % tolerance of 1, then applies its behaviour: stabilisation windows (up: the
//! lowest recommendation of the window; down: the highest) and rate policies, and min/max.

use std::collections::VecDeque;

/// One partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// The group's committed offset, if any.
    pub committed: Option<i64>,
    /// Log start.
    pub earliest: i64,
    /// Log end.
    pub latest: i64,
}

/// Where a group without a commit starts (KEDA's `offsetResetPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetPolicy {
    /// From the log start: all of it is lag.
    Earliest,
    /// From the log end: no lag.
    Latest,
}

/// The trigger's settings that change the metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KafkaTrigger {
    /// Target lag per replica.
    pub lag_threshold: i64,
    /// Lag above which the group is active (scaled from zero).
    pub activation_lag_threshold: i64,
    /// Where a partition without a commit starts.
    pub offset_reset_policy: ResetPolicy,
    /// Whether replicas beyond the partition count are allowed.
    pub allow_idle_consumers: bool,
    /// A partition without a commit counts 0 instead of 1 (latest) or its log (earliest).
    pub scale_to_zero_on_invalid_offset: bool,
    /// Cap at the partitions that have lag rather than all partitions.
    pub limit_to_partitions_with_lag: bool,
}

/// What KEDA reports: the metric and whether the group is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaMetric {
    /// The (capped) total lag the HPA sees.
    pub metric: i64,
    /// The uncapped total lag.
    pub total_lag: i64,
    /// Above the activation threshold.
    pub active: bool,
}

/// KEDA's Kafka metric for `partitions`.
pub fn kafka_metric(trigger: &KafkaTrigger, partitions: &[PartitionOffsets]) -> KafkaMetric {
    let lag_of = |p: &PartitionOffsets| match (p.committed, trigger.offset_reset_policy) {
        (Some(c), _) => p.latest - c,
        (None, _) if trigger.scale_to_zero_on_invalid_offset => 0,
        (None, ResetPolicy::Latest) => 1,
        (None, ResetPolicy::Earliest) => p.latest,
    };
    let lags: Vec<i64> = partitions.iter().map(lag_of).collect();
    let total_lag: i64 = lags.iter().sum();
    let mut metric = total_lag;
    if !trigger.allow_idle_consumers || trigger.limit_to_partitions_with_lag {
        let upper = if trigger.limit_to_partitions_with_lag {
            lags.iter().filter(|l| **l > 0).count()
        } else {
            partitions.len()
        };
        let upper = i64::try_from(upper).unwrap_or(i64::MAX);
        let threshold = trigger.lag_threshold.max(1);
        if total_lag / threshold > upper {
            metric = upper * threshold;
        }
    }
    KafkaMetric {
        metric,
        total_lag,
        active: total_lag > trigger.activation_lag_threshold,
    }
}

/// A rate policy: at most `value` pods, or `value` percent of the replicas at the start
/// of the period, per `period_s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Absolute pods.
    Pods {
        /// Pods per period.
        value: u32,
        /// Period, seconds.
        period_s: u32,
    },
    /// Percent of the replicas.
    Percent {
        /// Percent per period.
        value: u32,
        /// Period, seconds.
        period_s: u32,
    },
}

/// One direction's behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// Stabilisation window, seconds.
    pub stabilization_s: u32,
    /// Policies; the most permissive one applies (`selectPolicy: Max`).
    pub policies: Vec<Policy>,
}

/// The HPA's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Hpa {
    /// Fewest replicas.
    pub min_replicas: u32,
    /// Most replicas.
    pub max_replicas: u32,
    /// Target per replica (`lagThreshold`).
    pub target: f64,
    /// Tolerance around a usage ratio of 1 (Kubernetes' default 0.1).
    pub tolerance: f64,
    /// Scaling up.
    pub up: Rules,
    /// Scaling down.
    pub down: Rules,
}

impl Hpa {
    /// The seed's asymmetry: up within 30 s by up to +100 % a minute, down only after
    /// 600 s of lower recommendations and by 2 pods per 120 s.
    pub fn seed(min_replicas: u32, max_replicas: u32, target: f64) -> Self {
        Hpa {
            min_replicas,
            max_replicas,
            target,
            tolerance: 0.1,
            up: Rules {
                stabilization_s: 30,
                policies: vec![Policy::Percent {
                    value: 100,
                    period_s: 60,
                }],
            },
            down: Rules {
                stabilization_s: 600,
                policies: vec![Policy::Pods {
                    value: 2,
                    period_s: 120,
                }],
            },
        }
    }

    /// The raw recommendation for `metric` with `current` replicas (before behaviour).
    pub fn recommend(&self, metric: f64, current: u32) -> u32 {
        if current == 0 {
            return if metric > 0.0 {
                self.min_replicas.max(1)
            } else {
                0
            };
        }
        let ratio = metric / (self.target * f64::from(current));
        if (ratio - 1.0).abs() <= self.tolerance {
            return current;
        }
        (metric / self.target).ceil().max(0.0) as u32
    }
}

/// The HPA's memory: recommendations and scale events, for windows and policies.
#[derive(Debug, Clone, Default)]
pub struct HpaState {
    recommendations: VecDeque<(f64, u32)>,
    events: VecDeque<(f64, i64)>,
}

impl HpaState {
    /// One sync at time `now_s` with `metric` and `current` replicas: the new replica count.
    pub fn sync(&mut self, hpa: &Hpa, now_s: f64, metric: f64, current: u32) -> u32 {
        self.decide(hpa, now_s, hpa.recommend(metric, current), current)
    }

    /// One sync with the raw recommendation already made (with several triggers, the HPA
    /// takes the largest of their recommendations): windows, policies, min/max.
    pub fn decide(&mut self, hpa: &Hpa, now_s: f64, recommendation: u32, current: u32) -> u32 {
        let raw = recommendation.clamp(hpa.min_replicas, hpa.max_replicas);
        self.recommendations.push_back((now_s, raw));
        let keep = f64::from(hpa.up.stabilization_s.max(hpa.down.stabilization_s));
        while self
            .recommendations
            .front()
            .is_some_and(|(t, _)| now_s - t > keep)
        {
            self.recommendations.pop_front();
        }
        let window = |s: u32| {
            self.recommendations
                .iter()
                .filter(move |(t, _)| now_s - t <= f64::from(s))
                .map(|(_, r)| *r)
        };
        // Up: the lowest recommendation of the up window; down: the highest of the down one.
        let up_to = window(hpa.up.stabilization_s).min().unwrap_or(raw);
        let down_to = window(hpa.down.stabilization_s).max().unwrap_or(raw);
        let stable = if raw > current {
            up_to.max(current)
        } else {
            down_to.min(current)
        };
        let next = if stable > current {
            let allowed = self.allowed(&hpa.up.policies, now_s, current, true);
            stable.min(allowed)
        } else if stable < current {
            let allowed = self.allowed(&hpa.down.policies, now_s, current, false);
            stable.max(allowed)
        } else {
            current
        };
        let next = next.clamp(hpa.min_replicas, hpa.max_replicas);
        if next != current {
            self.events
                .push_back((now_s, i64::from(next) - i64::from(current)));
        }
        next
    }

    /// The furthest the policies allow from `current` (the most permissive policy).
    fn allowed(&mut self, policies: &[Policy], now_s: f64, current: u32, up: bool) -> u32 {
        let longest = policies
            .iter()
            .map(|p| match p {
                Policy::Pods { period_s, .. } | Policy::Percent { period_s, .. } => *period_s,
            })
            .max()
            .unwrap_or(0);
        while self
            .events
            .front()
            .is_some_and(|(t, _)| now_s - t > f64::from(longest))
        {
            self.events.pop_front();
        }
        let mut best: Option<u32> = None;
        for p in policies {
            let (period, value, percent) = match *p {
                Policy::Pods { value, period_s } => (period_s, value, false),
                Policy::Percent { value, period_s } => (period_s, value, true),
            };
            let changed: i64 = self
                .events
                .iter()
                .filter(|(t, d)| now_s - t <= f64::from(period) && ((*d > 0) == up))
                .map(|(_, d)| *d)
                .sum();
            // The replicas at the start of the period.
            let base = u32::try_from((i64::from(current) - changed).max(0)).unwrap_or(0);
            let limit = if percent {
                (f64::from(base) * f64::from(value) / 100.0).ceil() as u32
            } else {
                value
            };
            let bound = if up {
                base.saturating_add(limit.max(1))
            } else {
                base.saturating_sub(limit)
            };
            best = Some(match best {
                None => bound,
                Some(b) if up => b.max(bound),
                Some(b) => b.min(bound),
            });
        }
        best.unwrap_or(if up { u32::MAX } else { 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(idle: bool) -> KafkaTrigger {
        KafkaTrigger {
            lag_threshold: 10,
            activation_lag_threshold: 0,
            offset_reset_policy: ResetPolicy::Latest,
            allow_idle_consumers: idle,
            scale_to_zero_on_invalid_offset: false,
            limit_to_partitions_with_lag: false,
        }
    }

    fn at(committed: Option<i64>, latest: i64) -> PartitionOffsets {
        PartitionOffsets {
            committed,
            earliest: 0,
            latest,
        }
    }

    #[test]
    fn kafka_metric_follows_the_scalers_rules() {
        let parts = [at(Some(0), 100), at(Some(90), 100), at(None, 50)];
        // No commit under latest counts 1: 100 + 10 + 1.
        let m = kafka_metric(&trigger(false), &parts);
        assert_eq!((m.total_lag, m.metric, m.active), (111, 30, true));
        assert_eq!(kafka_metric(&trigger(true), &parts).metric, 111);
        let mut t = trigger(true);
        t.offset_reset_policy = ResetPolicy::Earliest;
        assert_eq!(
            kafka_metric(&t, &parts).total_lag,
            160,
            "no commit: the latest offset"
        );
        t.scale_to_zero_on_invalid_offset = true;
        assert_eq!(kafka_metric(&t, &parts).total_lag, 110);
        t.activation_lag_threshold = 200;
        assert!(!kafka_metric(&t, &parts).active);
        // The cap compares with integer division: 35 / 10 = 3 is not above 3 partitions.
        let three = [at(Some(0), 35), at(Some(0), 0), at(Some(0), 0)];
        assert_eq!(kafka_metric(&trigger(false), &three).metric, 35);
        let three = [at(Some(0), 45), at(Some(0), 0), at(Some(0), 0)];
        assert_eq!(kafka_metric(&trigger(false), &three).metric, 30);
        // Only partitions with lag count as the bound: one here.
        let mut lagging = trigger(true);
        lagging.limit_to_partitions_with_lag = true;
        assert_eq!(kafka_metric(&lagging, &three).metric, 10);
    }

    #[test]
    fn recommendations_respect_the_tolerance() {
        let hpa = Hpa::seed(1, 40, 5.0);
        assert_eq!(hpa.recommend(100.0, 4), 20);
        assert_eq!(hpa.recommend(21.0, 4), 4, "within 10 % of 4 × 5");
        assert_eq!(hpa.recommend(23.0, 4), 5);
        assert_eq!(hpa.recommend(0.0, 4), 0);
    }

    #[test]
    fn up_doubles_per_minute_and_down_waits_ten_minutes() {
        let hpa = Hpa::seed(1, 40, 5.0);
        let mut s = HpaState::default();
        // A huge lag: +100 % per 60 s from 4.
        assert_eq!(s.sync(&hpa, 0.0, 1e6, 4), 8);
        assert_eq!(
            s.sync(&hpa, 15.0, 1e6, 8),
            8,
            "no more within the same minute"
        );
        assert_eq!(s.sync(&hpa, 61.0, 1e6, 8), 16);
        // The lag is gone: nothing changes for 600 s, then 2 pods per 120 s.
        let mut t = 61.0;
        let mut n = 16;
        while t < 61.0 + 600.0 {
            t += 15.0;
            n = s.sync(&hpa, t, 0.0, n);
            assert_eq!(n, 16, "at {t}");
        }
        t += 15.0;
        n = s.sync(&hpa, t, 0.0, n);
        assert_eq!(n, 14);
        t += 15.0;
        assert_eq!(s.sync(&hpa, t, 0.0, n), 14, "2 pods per 120 s");
    }
}
