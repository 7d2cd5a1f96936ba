//! The one quantile every figure of docflow uses: the stage windows the result store
//! reports ([`crate::ResultStore::window`]), `docflow calibrate` and the benchmarks.

/// The nearest-rank quantile `q` (0..=1) of `sorted` (ascending): the smallest value with at
/// least a fraction `q` of the values at or below it. `None` when `sorted` is empty.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.50), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&[7.5], 0.99), Some(7.5));
        assert_eq!(quantile::<i64>(&[], 0.5), None);
        // Ten values: the p99 is the largest, the p50 the fifth.
        let ten = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(
            (quantile(&ten, 0.5), quantile(&ten, 0.99)),
            (Some(5), Some(10))
        );
    }
}
