//! [`Ops`] on the host, with the CUDA path's semantics: cuBLAS's column-major GEMM with f32
//! accumulation, and every stored activation rounded to f16 where the device stores f16. The
//! tests run [`super::forward::forward`] on it against candle's f32 model, which checks the
//! layouts and strides of the GPU path — and how much fp16 storage costs — on any machine.
//! The head split and merge and the pooling are [`crate::layout`]'s, as on the CPU path
//! (rounded here where the device stores f16).

use std::cell::RefCell;

use half::f16;

use super::forward::{Dims, Gemm, Ops, Trans, Weights};
use crate::layout;

/// Values rounded as an f16 buffer would hold them.
fn round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The host "device".
#[derive(Debug)]
pub(crate) struct HostOps {
    dims: Dims,
    /// GEMMs run, for the tests to see the batched ones were used.
    pub(crate) gemms: RefCell<Vec<Gemm>>,
}

impl HostOps {
    pub(crate) fn new(dims: Dims) -> Self {
        HostOps {
            dims,
            gemms: RefCell::new(Vec::new()),
        }
    }

    fn gemm(&self, g: &Gemm, a: &[f32], b: &[f32], c: &mut [f32], half: bool) {
        self.gemms.borrow_mut().push(*g);
        for batch in 0..g.batch {
            let (a, b) = (&a[batch * g.stride_a..], &b[batch * g.stride_b..]);
            let c = &mut c[batch * g.stride_c..];
            for j in 0..g.n {
                for i in 0..g.m {
                    let mut sum = 0f32;
                    for l in 0..g.k {
                        let x = match g.transa {
                            Trans::N => a[i + l * g.lda],
                            Trans::T => a[l + i * g.lda],
                        };
                        let y = match g.transb {
                            Trans::N => b[l + j * g.ldb],
                            Trans::T => b[j + l * g.ldb],
                        };
                        sum += x * y;
                    }
                    let v = g.alpha * sum;
                    c[i + j * g.ldc] = if half { round(v) } else { v };
                }
            }
        }
    }

    /// Layer norm of `v` into `out`, rounded.
    fn norm(&self, v: &[f32], gamma: &[f32], beta: &[f32], out: &mut [f32]) {
        #[allow(clippy::cast_precision_loss)]
        let n = v.len() as f32;
        let mean = v.iter().sum::<f32>() / n;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
        let inv = 1.0 / (var + self.dims.eps).sqrt();
        for (c, o) in out.iter_mut().enumerate() {
            *o = round((v[c] - mean) * inv * gamma[c] + beta[c]);
        }
    }
}

impl Ops for HostOps {
    type Half = Vec<f32>;
    type Float = Vec<f32>;
    type Index = Vec<u32>;
    type Error = super::forward::InputError;

    fn half(&self, len: usize) -> Result<Vec<f32>, Self::Error> {
        Ok(vec![0.0; len])
    }
    fn float(&self, len: usize) -> Result<Vec<f32>, Self::Error> {
        Ok(vec![0.0; len])
    }
    fn index(&self, values: &[u32]) -> Result<Vec<u32>, Self::Error> {
        Ok(values.to_vec())
    }
    fn download(&self, buffer: &Vec<f32>) -> Result<Vec<f32>, Self::Error> {
        Ok(buffer.clone())
    }
    fn gemm_half(
        &self,
        g: &Gemm,
        a: &Vec<f32>,
        b: &Vec<f32>,
        c: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        self.gemm(g, a, b, c, true);
        Ok(())
    }
    fn gemm_float(
        &self,
        g: &Gemm,
        a: &Vec<f32>,
        b: &Vec<f32>,
        c: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        self.gemm(g, a, b, c, false);
        Ok(())
    }
    fn embed(
        &self,
        ids: &Vec<u32>,
        tokens: usize,
        seq: usize,
        w: &Weights<Vec<f32>>,
        out: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        let h = self.dims.hidden;
        for t in 0..tokens {
            let id = ids[t] as usize;
            let p = t % seq;
            let v: Vec<f32> = (0..h)
                .map(|c| w.word[id * h + c] + w.position[p * h + c] + w.kind[c])
                .collect();
            self.norm(&v, &w.ln_g, &w.ln_b, &mut out[t * h..(t + 1) * h]);
        }
        Ok(())
    }
    fn split_heads(
        &self,
        qkv: &Vec<f32>,
        bias: &Vec<f32>,
        tokens: usize,
        seq: usize,
        q: &mut Vec<f32>,
        k: &mut Vec<f32>,
        v: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        layout::split_heads(
            &self.dims,
            qkv,
            bias,
            tokens,
            seq,
            [q.as_mut_slice(), k.as_mut_slice(), v.as_mut_slice()],
        );
        // The kernel stores each sum in f16 (the first `tokens × hidden` values are written).
        let written = tokens * self.dims.hidden;
        for buffer in [q, k, v] {
            for value in buffer.iter_mut().take(written) {
                *value = round(*value);
            }
        }
        Ok(())
    }
    fn softmax(
        &self,
        scores: &Vec<f32>,
        mask: &Vec<u32>,
        sequences: usize,
        seq: usize,
        probs: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        let heads = self.dims.heads;
        for row in 0..sequences * heads * seq {
            let s = row / (heads * seq);
            let keys = &mask[s * seq..(s + 1) * seq];
            let r = &scores[row * seq..(row + 1) * seq];
            let max = r
                .iter()
                .zip(keys)
                .filter(|(_, m)| **m != 0)
                .map(|(x, _)| *x)
                .fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = r
                .iter()
                .zip(keys)
                .map(|(x, m)| if *m != 0 { (x - max).exp() } else { 0.0 })
                .collect();
            let sum: f32 = e.iter().sum();
            for (o, x) in probs[row * seq..(row + 1) * seq].iter_mut().zip(e) {
                *o = round(x / sum);
            }
        }
        Ok(())
    }
    fn merge_heads(
        &self,
        ctx: &Vec<f32>,
        tokens: usize,
        seq: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        // A copy: `ctx` holds f16 values already.
        layout::merge_heads(&self.dims, ctx, tokens, seq, out);
        Ok(())
    }
    fn bias_residual_norm(
        &self,
        x: &Vec<f32>,
        bias: &Vec<f32>,
        residual: &Vec<f32>,
        gamma: &Vec<f32>,
        beta: &Vec<f32>,
        tokens: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        let h = self.dims.hidden;
        for t in 0..tokens {
            let v: Vec<f32> = (0..h)
                .map(|c| x[t * h + c] + bias[c] + residual[t * h + c])
                .collect();
            self.norm(&v, gamma, beta, &mut out[t * h..(t + 1) * h]);
        }
        Ok(())
    }
    fn bias_gelu(
        &self,
        x: &mut Vec<f32>,
        bias: &Vec<f32>,
        tokens: usize,
        cols: usize,
    ) -> Result<(), Self::Error> {
        for (i, value) in x.iter_mut().take(tokens * cols).enumerate() {
            let v = *value + bias[i % cols];
            *value = round(0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2)));
        }
        Ok(())
    }
    fn pool(
        &self,
        x: &Vec<f32>,
        mask: &Vec<u32>,
        sequences: usize,
        seq: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), Self::Error> {
        // f32 out, as the kernel's.
        layout::pool(&self.dims, x, mask, sequences, seq, out);
        Ok(())
    }
}

/// erf (Abramowitz–Stegun 7.1.26 is too coarse here; this is the series / continued
/// fraction pair with f64 inside, accurate to f32 rounding).
fn erf(x: f32) -> f32 {
    let x = f64::from(x);
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    // Numerical Recipes' erfc approximation (fractional error < 1.2e-7).
    let y = t
        * (-x * x - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    #[allow(clippy::cast_possible_truncation)]
    let r = if x >= 0.0 { 1.0 - y } else { y - 1.0 };
    r as f32
}

/// The weights as the GPU holds them: each value rounded to f16.
pub(crate) fn as_f16(w: &Weights<Vec<f32>>) -> Weights<Vec<f32>> {
    let rounded: Result<_, std::convert::Infallible> = w
        .clone()
        .try_map(|v| Ok(v.iter().map(|x| round(*x)).collect::<Vec<f32>>()));
    match rounded {
        Ok(w) => w,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
        ] {
            assert!((erf(x) - want).abs() < 1e-6, "erf({x}) = {}", erf(x));
        }
    }
}
