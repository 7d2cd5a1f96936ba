//! `docflow plan`: scaling settings derived from measured service times.
//!
//! From a stage's p50 and p99 service time, the SLA on waiting, the peak arrival rate, the
//! cold start and the budget:
//! * **μ** = 1 / p50 records/s per replica (the seed's 40 ms → 25/s);
//! * **lagThreshold** by Little's law: the records one replica clears within the SLA wait,
//!   plus those it has done but not yet committed (Kafka's lag, which KEDA reads, counts
//!   them): μ × (SLA + commit interval) (the seed's 25 × (0.2 + 0.1) s = 7.5 → 8);
//! * **safe utilisation** from the p50–p99 spread: service times taken as log-normal
//!   (σ = ln(p99/p50) / 2.326, E[S] = p50·e^{σ²/2}, c_s² = e^{σ²} − 1) and Kingman's
//!   G/G/1 approximation with Poisson arrivals, `W_q ≈ ρ/(1−ρ) · (1 + c_s²)/2 · E[S]`,
//!   solved for the ρ at which W_q reaches the SLA;
//! * **replicas at the peak** = ceil(peak / (μ × ρ_safe)), capped by the partitions;
//! * **maxReplicas** from the budget (budget per day / 24 / cost per replica-hour) and the
//!   partitions; **minReplicas** enough for the peak when the cold start is longer than the
//!   SLA allows a backlog to build (no lag-driven scale-up can help within it), else the
//!   replicas for a tenth of the peak;
//! * **max.poll.interval.ms** comfortably above the slowest record: 10 × p99, at least
//!   300 s (docflow's poll loop never waits for a handler; this only catches a wedged one).

/// What a plan is made from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanInput {
    /// Median service time, seconds.
    pub p50_s: f64,
    /// 99th percentile service time, seconds.
    pub p99_s: f64,
    /// Waiting-time SLA, seconds.
    pub sla_wait_s: f64,
    /// The consumers' `--commit-interval`, seconds: a record done waits up to this long
    /// before its offset is committed, counted as lag meanwhile.
    pub commit_interval_s: f64,
    /// Peak arrival rate, records/s.
    pub peak_rate: f64,
    /// Cost of one replica per hour.
    pub replica_cost_per_hour: f64,
    /// Budget per day.
    pub budget_per_day: f64,
    /// Seconds from asking for a replica to it serving.
    pub cold_start_s: f64,
    /// Partitions of the topic.
    pub partitions: u32,
}

/// The derived settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Records/s per replica.
    pub service_rate: f64,
    /// KEDA `lagThreshold`.
    pub lag_threshold: u64,
    /// Highest utilisation that keeps the mean wait within the SLA.
    pub safe_utilisation: f64,
    /// Squared coefficient of variation of the service time (from the spread).
    pub service_cv2: f64,
    /// Replicas the peak needs.
    pub peak_replicas: u32,
    /// HPA `minReplicas`.
    pub min_replicas: u32,
    /// HPA `maxReplicas`.
    pub max_replicas: u32,
    /// What `max_replicas` was limited by.
    pub max_limited_by: &'static str,
    /// Whether the peak fits under `max_replicas`.
    pub peak_fits: bool,
    /// `max.poll.interval.ms`.
    pub max_poll_interval_ms: u64,
    /// Cost per day at `min_replicas` around the clock.
    pub floor_cost_per_day: f64,
}

/// Derives the plan, or says why it cannot.
pub fn plan(i: &PlanInput) -> Result<Plan, String> {
    if !(i.p50_s > 0.0 && i.p99_s >= i.p50_s) {
        return Err("need 0 < p50 <= p99".into());
    }
    if !(i.sla_wait_s > 0.0 && i.peak_rate > 0.0 && i.replica_cost_per_hour > 0.0) {
        return Err("the SLA, the peak rate and the replica cost must be positive".into());
    }
    if i.commit_interval_s.is_nan() || i.commit_interval_s < 0.0 {
        return Err("the commit interval cannot be negative".into());
    }
    if i.partitions == 0 {
        return Err("the topic needs partitions".into());
    }
    let service_rate = 1.0 / i.p50_s;
    let lag_threshold = (service_rate * (i.sla_wait_s + i.commit_interval_s))
        .round()
        .max(1.0) as u64;
    let sigma = (i.p99_s / i.p50_s).ln() / 2.326;
    let mean = i.p50_s * (sigma * sigma / 2.0).exp();
    let cv2 = (sigma * sigma).exp() - 1.0;
    let k = i.sla_wait_s / (mean * (1.0 + cv2) / 2.0);
    let safe_utilisation = (k / (1.0 + k)).min(0.95);
    let per_replica = (1.0 / mean) * safe_utilisation;
    let peak_replicas = (i.peak_rate / per_replica).ceil() as u32;
    let by_budget = (i.budget_per_day / 24.0 / i.replica_cost_per_hour)
        .floor()
        .max(0.0) as u32;
    let (max_replicas, max_limited_by) = if by_budget < i.partitions {
        (by_budget.max(1), "budget")
    } else {
        (i.partitions, "partitions")
    };
    // A backlog may build for at most the SLA wait's worth of the peak; a cold start longer
    // than that cannot be covered by scaling up: the floor must carry the peak.
    let min_wanted = if i.cold_start_s > i.sla_wait_s {
        peak_replicas
    } else {
        ((i.peak_rate / 10.0) / per_replica).ceil().max(1.0) as u32
    };
    let min_replicas = min_wanted.min(max_replicas);
    let max_poll_interval_ms = ((i.p99_s * 10.0 * 1000.0).ceil() as u64).max(300_000);
    Ok(Plan {
        service_rate,
        lag_threshold,
        safe_utilisation,
        service_cv2: cv2,
        peak_replicas,
        min_replicas,
        max_replicas,
        max_limited_by,
        peak_fits: peak_replicas <= max_replicas,
        max_poll_interval_ms,
        floor_cost_per_day: f64::from(min_replicas) * i.replica_cost_per_hour * 24.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> PlanInput {
        PlanInput {
            p50_s: 0.040,
            p99_s: 0.040,
            sla_wait_s: 0.2,
            commit_interval_s: 0.1,
            peak_rate: 200.0,
            replica_cost_per_hour: 1.006,
            budget_per_day: 966.0,
            cold_start_s: 227.0,
            partitions: 64,
        }
    }

    #[test]
    fn the_seeds_numbers() {
        let p = plan(&seed()).unwrap();
        assert!((p.service_rate - 25.0).abs() < 1e-9);
        assert_eq!(p.lag_threshold, 8, "Little's law: 25 × (0.2 + 0.1) s = 7.5");
        // Without the commit interval, the SLA's records alone.
        let bare = plan(&PlanInput {
            commit_interval_s: 0.0,
            ..seed()
        })
        .unwrap();
        assert_eq!(bare.lag_threshold, 5, "25 × 0.2 s");
        // Lazier commits: more of the lag is records already done.
        let lazy = plan(&PlanInput {
            commit_interval_s: 1.0,
            ..seed()
        })
        .unwrap();
        assert_eq!(lazy.lag_threshold, 30, "25 × (0.2 + 1) s");
        assert!(
            plan(&PlanInput {
                commit_interval_s: -0.1,
                ..seed()
            })
            .is_err()
        );
        // 40 × USD 1.006/h ≈ USD 966/day.
        assert_eq!((p.max_replicas, p.max_limited_by), (40, "budget"));
        assert!(p.max_poll_interval_ms >= 300_000);
        // Constant service times (p99 = p50): Kingman's (1 + 0)/2 factor.
        assert!(p.service_cv2.abs() < 1e-12);
        let k: f64 = 0.2 / (0.04 * 0.5);
        assert!((p.safe_utilisation - (k / (1.0 + k)).min(0.95)).abs() < 1e-9);
        // A 227 s cold start is far beyond a 200 ms SLA: the floor carries the peak.
        assert_eq!(p.min_replicas, p.peak_replicas);
        assert!(p.peak_fits);
    }

    #[test]
    fn a_wide_spread_lowers_the_safe_utilisation() {
        let narrow = plan(&seed()).unwrap();
        let wide = plan(&PlanInput {
            p99_s: 0.400,
            ..seed()
        })
        .unwrap();
        assert!(wide.service_cv2 > 1.0);
        assert!(wide.safe_utilisation < narrow.safe_utilisation);
        assert!(wide.peak_replicas > narrow.peak_replicas);
        assert!(
            plan(&PlanInput {
                p99_s: 0.01,
                ..seed()
            })
            .is_err()
        );
        // Few partitions cap the replicas; a peak that does not fit says so.
        let capped = plan(&PlanInput {
            partitions: 4,
            ..seed()
        })
        .unwrap();
        assert_eq!(
            (capped.max_replicas, capped.max_limited_by),
            (4, "partitions")
        );
        assert!(!capped.peak_fits);
    }
}
