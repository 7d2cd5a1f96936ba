//! Capped exponential backoff with jitter for transient failures.

use std::time::Duration;

/// Retry schedule of a consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl RetryPolicy {
    /// Delay after failed attempt `attempt` (1-based): `base * 2^(attempt-1)`, capped at
    /// `max`, then scaled by a random factor in [0.5, 1.0] so that replicas that failed
    /// together do not retry together.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        let raw = self.base.saturating_mul(1u32 << exp);
        let capped = raw.min(self.max);
        let jitter: f64 = 0.5 + rand::random::<f64>() * 0.5;
        capped.mul_f64(jitter)
    }

    /// Whether attempt `attempt` failing transiently leaves another attempt.
    pub fn may_retry(&self, attempt: u32) -> bool {
        attempt < self.max_attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps_with_jitter() {
        let p = RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        for _ in 0..200 {
            let d1 = p.delay(1);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = p.delay(3);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d20 = p.delay(20);
            assert!(d20 >= Duration::from_millis(500) && d20 <= Duration::from_secs(1));
        }
        assert!(p.delay(u32::MAX) <= Duration::from_secs(1));
        assert!(p.may_retry(4));
        assert!(!p.may_retry(5));
    }
}
