//! The Horizontal Pod Autoscaler, as arithmetic: a metric with an `AverageValue` target
//! (KEDA's Kafka trigger: `lagThreshold`, see [`crate::keda`]) becomes
//! `desired = ceil(metric / target)` unless `metric / (target × current)` is within the
//! 10 % tolerance of 1; then the behaviour applies: stabilisation windows (up: the lowest
//! recommendation of the window; down: the highest), rate policies, and min/max.

use std::collections::VecDeque;

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
