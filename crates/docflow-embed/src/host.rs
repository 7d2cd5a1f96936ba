//! The CPU path: the GPU path's forward pass ([`crate::gpu::forward`]) on the host in f32.
//!
//! Why not candle's BERT: profiled on this project's 2-core machine (`perf record` of
//! `embed-bench run --device cpu`), candle spent about a fifth of its time in matrix products
//! and the rest around them — scalar `erff` for GELU and `expf` for softmax, page faults from a
//! fresh allocation per operation, its thread pool — and ran at 0.4–0.8× sentence-transformers.
//! Here the matrix products are still candle's (gemm, AVX-512 kernels where the CPU has them;
//! one fused query/key/value product, attention as batched products over every head), and
//! everything between them is a loop over rows split across the cores, with a branch-free
//! `exp` and `erf` the compiler vectorises, writing into buffers allocated once per batch.
//! The head split and merge and the pooling are [`crate::layout`]'s, shared with the GPU
//! path's host reference.

use std::thread;

use candle_core::{Device, Tensor};

use crate::gpu::forward::{Dims, Gemm, InputError, Ops, Trans, Weights, WeightsError, forward};
use crate::layout;

/// Values an operation must touch before it is split across threads.
const MIN_PARALLEL_ELEMENTS: usize = 1 << 16;

/// CPU encoder failures.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// The weights could not be loaded.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// candle failed (making a weight matrix a tensor, or in a matrix product).
    #[error("candle: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A GEMM this path does not run.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The input's sizes do not fit the model.
    #[error("input: {0}")]
    Input(#[from] InputError),
}

/// The host "device": f32 everywhere.
#[derive(Debug)]
pub(crate) struct HostOps {
    dims: Dims,
    threads: usize,
    /// The weight matrices as candle tensors `[1, out, in]`, made once, by the address of
    /// their buffer (weights never change or move: copying them into a tensor for every
    /// product cost ~42 MB of memcpy per batch, most of a one-sentence batch's time).
    frozen: std::collections::HashMap<usize, Tensor>,
}

/// `2^x` for `x` in about [-126, 126], branch-free so loops of it vectorise (no `floor`:
/// without SSE4.1 in the baseline target that is a libm call): `x = n + f` with `n` the
/// nearest integer (the 1.5·2^23 rounding trick) and `f` in [-0.5, 0.5]; `2^n` goes to the
/// exponent bits and `2^f` through its degree-6 Taylor polynomial (relative error < 3e-7).
#[inline]
fn exp2(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23
    let x = x.clamp(-126.0, 126.0);
    let n = (x + ROUND) - ROUND;
    let f = x - n;
    let p = 1.0
        + f * (std::f32::consts::LN_2
            + f * (0.240_226_5
                + f * (0.055_504_11
                    + f * (0.009_618_129 + f * (0.001_333_355_8 + f * 0.000_154_035_3)))));
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bits = ((n as i32 + 127) as u32) << 23;
    p * f32::from_bits(bits)
}

/// `e^x`.
#[inline]
fn exp(x: f32) -> f32 {
    exp2(x * std::f32::consts::LOG2_E)
}

/// Sum of `v` in eight lanes (a plain `iter().sum()` of floats is one dependency chain the
/// compiler may not reorder, so it never vectorises).
#[inline]
fn sum(v: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = v.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += x;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Maximum of `v` in eight lanes.
#[inline]
fn max(v: &[f32]) -> f32 {
    let mut lanes = [f32::MIN; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::MIN, |a, &b| if b > a { b } else { a });
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = if x > *l { x } else { *l };
        }
    }
    lanes.iter().fold(tail, |a, &b| if b > a { b } else { a })
}

/// erf, Abramowitz–Stegun 7.1.26 (absolute error 1.5e-7, about 3e-7 in f32), branch-free.
#[inline]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - t * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))))
            * exp(-a * a);
    y.copysign(x)
}

impl HostOps {
    pub(crate) fn new(dims: Dims) -> Self {
        let threads = thread::available_parallelism().map_or(1, std::num::NonZero::get);
        HostOps {
            dims,
            threads,
            frozen: std::collections::HashMap::new(),
        }
    }

    /// Keeps `w` (`[out, in]`, row-major) as a tensor for the products that read it.
    fn freeze(&mut self, w: &[f32], out: usize, inp: usize) -> Result<(), CpuError> {
        let t = Tensor::from_slice(w, (1, out, inp), &Device::Cpu)?;
        self.frozen.insert(w.as_ptr() as usize, t);
        Ok(())
    }

    /// Runs `f(first_row, rows)` over `out`'s rows of `width`, split across the cores.
    fn rows<F>(&self, out: &mut [f32], width: usize, f: F)
    where
        F: Fn(usize, &mut [f32]) + Sync,
    {
        let rows = out.len() / width.max(1);
        let per = rows.div_ceil(self.threads).max(1);
        // Starting threads costs tens of microseconds: below this much work one thread is
        // faster (a 10-token query was slower split).
        if rows <= per || out.len() < MIN_PARALLEL_ELEMENTS {
            f(0, out);
            return;
        }
        thread::scope(|s| {
            for (i, part) in out.chunks_mut(per * width).enumerate() {
                let f = &f;
                s.spawn(move || f(i * per, part));
            }
        });
    }

    /// Layer norm of `v` (one row) into `out`.
    fn norm(&self, v: &[f32], gamma: &[f32], beta: &[f32], out: &mut [f32]) {
        #[allow(clippy::cast_precision_loss)]
        let n = v.len() as f32;
        let mean = sum(v) / n;
        for (o, x) in out.iter_mut().zip(v) {
            *o = (x - mean) * (x - mean);
        }
        let inv = 1.0 / (sum(out) / n + self.dims.eps).sqrt();
        for (((o, x), g), b) in out.iter_mut().zip(v).zip(gamma).zip(beta) {
            *o = (x - mean) * inv * g + b;
        }
    }

    /// One GEMM (see [`Gemm`]) through candle's matrix product: the column-major
    /// `C = op(A)·op(B)` is the row-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`, and with tight leading
    /// dimensions (all this pass uses) every operand is a plain view of its buffer.
    fn gemm(&self, g: &Gemm, a: &[f32], b: &[f32], c: &mut [f32]) -> Result<(), CpuError> {
        let tight = match (g.transa, g.transb) {
            (Trans::N, Trans::N) => g.lda == g.m && g.ldb == g.k,
            (Trans::T, Trans::N) => g.lda == g.k && g.ldb == g.k,
            (Trans::N, Trans::T) => g.lda == g.m && g.ldb == g.n,
            (Trans::T, Trans::T) => g.lda == g.k && g.ldb == g.n,
        } && g.ldc == g.m;
        let (size_a, size_b, size_c) = (g.m * g.k, g.k * g.n, g.m * g.n);
        let strided =
            g.batch == 1 || (g.stride_a == size_a && g.stride_b == size_b && g.stride_c == size_c);
        if !tight || !strided {
            return Err(CpuError::Unsupported(format!(
                "a GEMM with padded leading dimensions or strides: {g:?}"
            )));
        }
        let cpu = Device::Cpu;
        let batch = g.batch;
        let view = |data: &[f32], len: usize, rows: usize, cols: usize| {
            Tensor::from_slice(&data[..batch * len], (batch, rows, cols), &cpu)
        };
        // op(B)ᵀ: [n, k].
        let left = match g.transb {
            Trans::N => view(b, size_b, g.n, g.k)?,
            Trans::T => view(b, size_b, g.k, g.n)?.transpose(1, 2)?,
        };
        // op(A)ᵀ: [k, m].
        let frozen = self
            .frozen
            .get(&(a.as_ptr() as usize))
            .filter(|t| batch == 1 && g.transa == Trans::T && t.dims() == [1, g.m, g.k]);
        let right = match (frozen, g.transa) {
            (Some(t), _) => t.transpose(1, 2)?,
            (None, Trans::N) => view(a, size_a, g.k, g.m)?,
            (None, Trans::T) => view(a, size_a, g.m, g.k)?.transpose(1, 2)?,
        };
        let mut product = left.matmul(&right)?;
        if g.alpha != 1.0 {
            product = product.affine(f64::from(g.alpha), 0.0)?;
        }
        let flat = product.flatten_all()?.to_vec1::<f32>()?;
        c[..flat.len()].copy_from_slice(&flat);
        Ok(())
    }
}

impl Ops for HostOps {
    type Half = Vec<f32>;
    type Float = Vec<f32>;
    type Index = Vec<u32>;
    type Error = CpuError;

    fn half(&self, len: usize) -> Result<Vec<f32>, CpuError> {
        Ok(vec![0.0; len])
    }
    fn float(&self, len: usize) -> Result<Vec<f32>, CpuError> {
        Ok(vec![0.0; len])
    }
    fn index(&self, values: &[u32]) -> Result<Vec<u32>, CpuError> {
        Ok(values.to_vec())
    }
    fn download(&self, buffer: &Vec<f32>) -> Result<Vec<f32>, CpuError> {
        Ok(buffer.clone())
    }
    fn gemm_half(
        &self,
        g: &Gemm,
        a: &Vec<f32>,
        b: &Vec<f32>,
        c: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
        self.gemm(g, a, b, c)
    }
    fn gemm_float(
        &self,
        g: &Gemm,
        a: &Vec<f32>,
        b: &Vec<f32>,
        c: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
        self.gemm(g, a, b, c)
    }
    fn embed(
        &self,
        ids: &Vec<u32>,
        _tokens: usize,
        seq: usize,
        w: &Weights<Vec<f32>>,
        out: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
        let h = self.dims.hidden;
        let vocab = self.dims.vocab;
        self.rows(out, h, |first, part| {
            let mut v = vec![0f32; h];
            for (r, row) in part.chunks_mut(h).enumerate() {
                let t = first + r;
                let id = (ids[t] as usize).min(vocab - 1);
                let p = t % seq;
                let word = &w.word[id * h..(id + 1) * h];
                let position = &w.position[p * h..(p + 1) * h];
                for (((x, a), b), c) in v.iter_mut().zip(word).zip(position).zip(&w.kind) {
                    *x = a + b + c;
                }
                self.norm(&v, &w.ln_g, &w.ln_b, row);
            }
        });
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
    ) -> Result<(), CpuError> {
        layout::split_heads(
            &self.dims,
            qkv,
            bias,
            tokens,
            seq,
            [q.as_mut_slice(), k.as_mut_slice(), v.as_mut_slice()],
        );
        Ok(())
    }
    fn softmax(
        &self,
        scores: &Vec<f32>,
        mask: &Vec<u32>,
        _sequences: usize,
        seq: usize,
        probs: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
        let heads = self.dims.heads;
        self.rows(probs, seq, |first, part| {
            for (r, out) in part.chunks_mut(seq).enumerate() {
                let row = first + r;
                let s = row / (heads * seq);
                let keys = &mask[s * seq..(s + 1) * seq];
                let x = &scores[row * seq..(row + 1) * seq];
                for ((o, v), m) in out.iter_mut().zip(x).zip(keys) {
                    *o = if *m != 0 { *v } else { f32::MIN };
                }
                let top = max(out);
                for (o, m) in out.iter_mut().zip(keys) {
                    let keep = f32::from(u8::from(*m != 0));
                    *o = exp(*o - top) * keep;
                }
                let inv = 1.0 / sum(out);
                out.iter_mut().for_each(|o| *o *= inv);
            }
        });
        Ok(())
    }
    fn merge_heads(
        &self,
        ctx: &Vec<f32>,
        tokens: usize,
        seq: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
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
        _tokens: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
        let h = self.dims.hidden;
        self.rows(out, h, |first, part| {
            let mut v = vec![0f32; h];
            for (r, row) in part.chunks_mut(h).enumerate() {
                let t = first + r;
                let xs = &x[t * h..(t + 1) * h];
                let rs = &residual[t * h..(t + 1) * h];
                for (((o, a), b), c) in v.iter_mut().zip(xs).zip(bias).zip(rs) {
                    *o = a + b + c;
                }
                self.norm(&v, gamma, beta, row);
            }
        });
        Ok(())
    }
    fn bias_gelu(
        &self,
        x: &mut Vec<f32>,
        bias: &Vec<f32>,
        _tokens: usize,
        cols: usize,
    ) -> Result<(), CpuError> {
        self.rows(x, cols, |_, part| {
            for row in part.chunks_mut(cols) {
                for (v, b) in row.iter_mut().zip(bias) {
                    let y = *v + b;
                    *v = 0.5 * y * (1.0 + erf(y * std::f32::consts::FRAC_1_SQRT_2));
                }
            }
        });
        Ok(())
    }
    fn pool(
        &self,
        x: &Vec<f32>,
        mask: &Vec<u32>,
        sequences: usize,
        seq: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), CpuError> {
        layout::pool(&self.dims, x, mask, sequences, seq, out);
        Ok(())
    }
}

/// The model on the CPU.
#[derive(Debug)]
pub(crate) struct HostModel {
    ops: HostOps,
    weights: Weights<Vec<f32>>,
    dims: Dims,
}

impl HostModel {
    pub(crate) fn new(weights: Weights<Vec<f32>>, dims: Dims) -> Result<Self, CpuError> {
        let mut ops = HostOps::new(dims);
        let (h, i) = (dims.hidden, dims.intermediate);
        for l in &weights.layers {
            ops.freeze(&l.qkv_w, 3 * h, h)?;
            ops.freeze(&l.out_w, h, h)?;
            ops.freeze(&l.inter_w, i, h)?;
            ops.freeze(&l.ffn_w, h, i)?;
        }
        Ok(HostModel { ops, weights, dims })
    }

    pub(crate) fn embed(
        &self,
        ids: &[u32],
        mask: &[u32],
        sequences: usize,
        seq: usize,
    ) -> Result<Vec<Vec<f32>>, CpuError> {
        forward(
            &self.ops,
            &self.dims,
            &self.weights,
            ids,
            mask,
            sequences,
            seq,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_and_erf_are_accurate() {
        for i in -400..=400 {
            let x = i as f32 / 20.0;
            let (e, want) = (exp(x), x.exp());
            assert!(
                ((e - want) / want).abs() < 5e-6,
                "exp({x}) = {e}, want {want}"
            );
        }
        assert_eq!(exp(-1000.0).min(1e-30), exp(-1000.0));
        for (x, want) in [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
            (3.5, 0.999_999_3),
        ] {
            assert!((erf(x) - want).abs() < 5e-7, "erf({x}) = {}", erf(x));
        }
    }
}
