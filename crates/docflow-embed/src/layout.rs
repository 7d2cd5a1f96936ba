//! The steps of the encoder pass that only move or average f32 values, written once for both
//! host implementations of [`crate::gpu::forward::Ops`]: the CPU path ([`crate::host`]) and
//! the GPU path's host reference (`gpu/reference.rs`, in the tests). Neither implementation
//! computes these differently (the reference rounds what its device would store in f16 on
//! top), so there is one copy of the layouts the CUDA kernels must match.
//!
//! Layouts as in [`crate::gpu::forward`]: `n` sequences padded to `seq` tokens, `t = n × seq`
//! tokens, hidden size `h`, `heads` heads of `d = h / heads`, everything row-major.

use crate::gpu::forward::Dims;

/// `qkv [t, 3h] + bias [3h]` split into the per-head `q`, `k`, `v` `[n, heads, seq, d]`
/// (`out` in that order).
pub(crate) fn split_heads(
    dims: &Dims,
    qkv: &[f32],
    bias: &[f32],
    tokens: usize,
    seq: usize,
    mut out: [&mut [f32]; 3],
) {
    let (h, heads, d) = (dims.hidden, dims.heads, dims.head());
    for t in 0..tokens {
        let (s, p) = (t / seq, t % seq);
        let row = &qkv[t * 3 * h..(t + 1) * 3 * h];
        for (which, part) in out.iter_mut().enumerate() {
            for head in 0..heads {
                let src = which * h + head * d;
                let dst = ((s * heads + head) * seq + p) * d;
                for ((o, x), b) in part[dst..dst + d]
                    .iter_mut()
                    .zip(&row[src..src + d])
                    .zip(&bias[src..src + d])
                {
                    *o = x + b;
                }
            }
        }
    }
}

/// `ctx [n, heads, seq, d]` back to `out [t, h]`.
pub(crate) fn merge_heads(dims: &Dims, ctx: &[f32], tokens: usize, seq: usize, out: &mut [f32]) {
    let (h, heads, d) = (dims.hidden, dims.heads, dims.head());
    for t in 0..tokens {
        let (s, p) = (t / seq, t % seq);
        for head in 0..heads {
            let src = ((s * heads + head) * seq + p) * d;
            out[t * h + head * d..t * h + (head + 1) * d].copy_from_slice(&ctx[src..src + d]);
        }
    }
}

/// The mean of each sequence's tokens whose `mask` (`[n, seq]`) is not 0, L2-normalised:
/// `x [t, h]` into `out [n, h]` (f32 on every device).
pub(crate) fn pool(
    dims: &Dims,
    x: &[f32],
    mask: &[u32],
    sequences: usize,
    seq: usize,
    out: &mut [f32],
) {
    let h = dims.hidden;
    for s in 0..sequences {
        let mean = &mut out[s * h..(s + 1) * h];
        mean.iter_mut().for_each(|m| *m = 0.0);
        let mut count = 0f32;
        for p in 0..seq {
            if mask[s * seq + p] != 0 {
                count += 1.0;
                for (m, v) in mean
                    .iter_mut()
                    .zip(&x[(s * seq + p) * h..(s * seq + p + 1) * h])
                {
                    *m += v;
                }
            }
        }
        let count = count.max(1e-9);
        mean.iter_mut().for_each(|m| *m /= count);
        let norm = mean.iter().map(|m| m * m).sum::<f32>().sqrt().max(1e-12);
        mean.iter_mut().for_each(|m| *m /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims() -> Dims {
        Dims {
            hidden: 4,
            heads: 2,
            intermediate: 8,
            layers: 1,
            vocab: 10,
            positions: 8,
            eps: 1e-12,
        }
    }

    /// Splitting then merging gives back each third of `qkv + bias`, and every value lands
    /// where `[n, heads, seq, d]` puts it.
    #[test]
    fn split_then_merge_round_trips() {
        let dims = dims();
        let (sequences, seq) = (2, 3);
        let tokens = sequences * seq;
        let h = dims.hidden;
        #[allow(clippy::cast_precision_loss)]
        let qkv: Vec<f32> = (0..tokens * 3 * h).map(|i| i as f32).collect();
        let bias = vec![0.5f32; 3 * h];
        let (mut q, mut k, mut v) = (
            vec![0f32; tokens * h],
            vec![0f32; tokens * h],
            vec![0f32; tokens * h],
        );
        split_heads(
            &dims,
            &qkv,
            &bias,
            tokens,
            seq,
            [q.as_mut_slice(), k.as_mut_slice(), v.as_mut_slice()],
        );
        // Sequence 1, head 1, position 2, element 0 of k: token 5, column h + 1·d + 0.
        let d = dims.head();
        assert_eq!(k[((2 + 1) * seq + 2) * d], qkv[5 * 3 * h + h + d] + 0.5);
        for (which, part) in [&q, &k, &v].into_iter().enumerate() {
            let mut merged = vec![0f32; tokens * h];
            merge_heads(&dims, part, tokens, seq, &mut merged);
            for t in 0..tokens {
                for c in 0..h {
                    assert_eq!(merged[t * h + c], qkv[t * 3 * h + which * h + c] + 0.5);
                }
            }
        }
    }

    /// Masked positions are left out of the mean, and each vector has unit length.
    #[test]
    fn pool_skips_masked_tokens_and_normalises() {
        let dims = dims();
        let x = [
            1.0, 0.0, 0.0, 0.0, // sequence 0
            0.0, 1.0, 0.0, 0.0, //
            9.0, 9.0, 9.0, 9.0, // padding
            0.0, 0.0, 3.0, 4.0, // sequence 1
            0.0, 0.0, 3.0, 4.0, //
            0.0, 0.0, 3.0, 4.0, //
        ];
        let mask = [1, 1, 0, 1, 1, 1];
        let mut out = [7.0f32; 8];
        pool(&dims, &x, &mask, 2, 3, &mut out);
        let half = std::f32::consts::FRAC_1_SQRT_2;
        for (got, want) in out.iter().zip([half, half, 0.0, 0.0, 0.0, 0.0, 0.6, 0.8]) {
            assert!((got - want).abs() < 1e-6, "{out:?}");
        }
    }
}
