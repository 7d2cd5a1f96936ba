//! Queueing formulas (rates per second, times in seconds).

/// Mean wait in the queue of an M/M/1 server (`W_q = ρ / (μ − λ)`); `None` when the
/// server cannot keep up (`λ ≥ μ`) or a rate is not positive.
pub fn mm1_wait(arrival: f64, service: f64) -> Option<f64> {
    if arrival <= 0.0 || service <= 0.0 || arrival >= service {
        return None;
    }
    Some((arrival / service) / (service - arrival))
}

/// Erlang C: the probability that an arriving record waits, with `servers` replicas each
/// serving `service` records/s and `arrival` records/s arriving; `None` when they cannot
/// keep up (`λ ≥ cμ`).
pub fn erlang_c(servers: u32, arrival: f64, service: f64) -> Option<f64> {
    let c = f64::from(servers);
    if servers == 0 || arrival <= 0.0 || service <= 0.0 || arrival >= c * service {
        return None;
    }
    let a = arrival / service;
    let rho = a / c;
    // Σ_{k<c} a^k/k! and a^c/c!, by running terms (no factorial overflow).
    let mut term = 1.0;
    let mut sum = 0.0;
    for k in 0..servers {
        sum += term;
        term *= a / f64::from(k + 1);
    }
    let top = term / (1.0 - rho);
    Some(top / (sum + top))
}

/// Mean wait in the queue of M/M/c: `W_q = C(c, a) / (cμ − λ)`.
pub fn mmc_wait(servers: u32, arrival: f64, service: f64) -> Option<f64> {
    let c = erlang_c(servers, arrival, service)?;
    Some(c / (f64::from(servers) * service - arrival))
}

/// The fewest replicas whose M/M/c mean wait stays within `sla_wait` at `arrival`.
pub fn replicas_for(arrival: f64, service: f64, sla_wait: f64) -> Option<u32> {
    if arrival <= 0.0 || service <= 0.0 {
        return None;
    }
    let least = (arrival / service).floor() as u32 + 1;
    (least..least.saturating_add(10_000))
        .find(|&c| mmc_wait(c, arrival, service).is_some_and(|w| w <= sla_wait))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// The seed's numbers: one replica at μ = 25/s.
    #[test]
    fn mm1_waits_explode_near_saturation() {
        assert!(close(mm1_wait(20.0, 25.0).unwrap(), 0.160, 1e-9)); // ρ 0.8
        assert!(close(mm1_wait(24.0, 25.0).unwrap(), 0.960, 1e-9)); // ρ 0.96
        assert!(close(mm1_wait(24.75, 25.0).unwrap(), 3.960, 1e-9)); // ρ 0.99
        assert_eq!(mm1_wait(25.0, 25.0), None);
    }

    /// The seed's numbers: c = 4, λ = 80, μ = 25.
    #[test]
    fn erlang_c_of_four_replicas() {
        let c = erlang_c(4, 80.0, 25.0).unwrap();
        assert!(close(c, 0.5964, 5e-5), "{c}");
        let w = mmc_wait(4, 80.0, 25.0).unwrap();
        assert!(close(w, 0.0298, 5e-5), "{w}");
        assert_eq!(erlang_c(4, 100.0, 25.0), None);
        // One server is M/M/1.
        assert!(close(
            mmc_wait(1, 20.0, 25.0).unwrap(),
            mm1_wait(20.0, 25.0).unwrap(),
            1e-12
        ));
        // 200/s within 200 ms at 25/s each.
        assert_eq!(replicas_for(200.0, 25.0, 0.2), Some(9));
    }
}
