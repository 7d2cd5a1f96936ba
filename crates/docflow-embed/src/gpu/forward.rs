//! The encoder's forward pass as a sequence of device operations, written once for every
//! implementation of [`Ops`]: the CUDA one ([`super::cuda`]) and a host one used by the tests
//! (`reference.rs`), which performs the same operations with the same layouts and the same
//! fp16 rounding on the CPU. So the layouts, transposes and strides of every GEMM — the part
//! that is easy to get wrong and impossible to see on a machine without a GPU — are checked
//! against candle on every machine; only the kernels' CUDA C itself needs a GPU to run.
//!
//! Layouts (row-major, `n` sequences padded to `seq` tokens, `t = n × seq` tokens, hidden
//! size `h`, `heads` heads of `d = h / heads`):
//! - hidden states `[t, h]` f16; the fused query/key/value projection `[t, 3h]`;
//! - per-head `q`, `k`, `v` `[n, heads, seq, d]`, so one strided-batched GEMM covers every
//!   (sequence, head) pair: scores `[n·heads, seq, seq]` in f32, probabilities in f16;
//! - a linear layer `Y = X·Wᵀ` with `W` `[out, in]` as stored by PyTorch is, in cuBLAS's
//!   column-major terms, `Yᵀ = op_T(W) · Xᵀ`: `transa = T, m = out, n = t, k = in`.

/// Sizes of the encoder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dims {
    /// Hidden size (384).
    pub hidden: usize,
    /// Attention heads (12).
    pub heads: usize,
    /// Feed-forward size (1536).
    pub intermediate: usize,
    /// Encoder layers (6).
    pub layers: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Position embeddings.
    pub positions: usize,
    /// Layer-norm epsilon.
    pub eps: f32,
}

impl Dims {
    /// Size of one head.
    pub fn head(&self) -> usize {
        self.hidden / self.heads
    }
}

/// Transpose flag of a GEMM operand, as cuBLAS has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trans {
    /// As stored (column-major).
    N,
    /// Transposed.
    T,
}

/// One (strided-batched) GEMM in cuBLAS's column-major terms:
/// `C_i = alpha · op(A_i) · op(B_i)` for `i < batch`, `C` overwritten.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    /// op(A).
    pub transa: Trans,
    /// op(B).
    pub transb: Trans,
    /// Rows of op(A) and C.
    pub m: usize,
    /// Columns of op(B) and C.
    pub n: usize,
    /// Columns of op(A), rows of op(B).
    pub k: usize,
    /// Scale.
    pub alpha: f32,
    /// Leading dimension of A.
    pub lda: usize,
    /// Elements between consecutive A_i.
    pub stride_a: usize,
    /// Leading dimension of B.
    pub ldb: usize,
    /// Elements between consecutive B_i.
    pub stride_b: usize,
    /// Leading dimension of C.
    pub ldc: usize,
    /// Elements between consecutive C_i.
    pub stride_c: usize,
    /// Number of products.
    pub batch: usize,
}

impl Gemm {
    /// `Y [tokens, out] = X [tokens, inp] · Wᵀ` with `W` `[out, inp]` (row-major).
    pub fn linear(tokens: usize, inp: usize, out: usize) -> Self {
        Gemm {
            transa: Trans::T,
            transb: Trans::N,
            m: out,
            n: tokens,
            k: inp,
            alpha: 1.0,
            lda: inp,
            stride_a: 0,
            ldb: inp,
            stride_b: 0,
            ldc: out,
            stride_c: 0,
            batch: 1,
        }
    }

    /// Scores `S_i [seq, seq] = Q_i · K_iᵀ · alpha` (row-major, a row per query) for
    /// `batch` heads of `[seq, d]`: column-major `S_iᵀ = op_T(K_i) · Q_iᵀ`.
    pub fn scores(batch: usize, seq: usize, d: usize, alpha: f32) -> Self {
        Gemm {
            transa: Trans::T,
            transb: Trans::N,
            m: seq,
            n: seq,
            k: d,
            alpha,
            lda: d,
            stride_a: seq * d,
            ldb: d,
            stride_b: seq * d,
            ldc: seq,
            stride_c: seq * seq,
            batch,
        }
    }

    /// Context `O_i [seq, d] = P_i [seq, seq] · V_i [seq, d]` (row-major): column-major
    /// `O_iᵀ = V_iᵀ · P_iᵀ`, both operands as stored.
    pub fn context(batch: usize, seq: usize, d: usize) -> Self {
        Gemm {
            transa: Trans::N,
            transb: Trans::N,
            m: d,
            n: seq,
            k: seq,
            alpha: 1.0,
            lda: d,
            stride_a: seq * d,
            ldb: seq,
            stride_b: seq * seq,
            ldc: d,
            stride_c: seq * d,
            batch,
        }
    }
}

/// One encoder layer's weights (f16), query/key/value fused into one `[3h, h]` matrix.
#[derive(Debug, Clone)]
pub struct Layer<B> {
    /// `[3h, h]`: query, key, value rows.
    pub qkv_w: B,
    /// `[3h]`.
    pub qkv_b: B,
    /// Attention output `[h, h]`.
    pub out_w: B,
    /// `[h]`.
    pub out_b: B,
    /// Attention layer norm.
    pub ln1_g: B,
    /// Attention layer norm bias.
    pub ln1_b: B,
    /// Feed-forward in `[i, h]`.
    pub inter_w: B,
    /// `[i]`.
    pub inter_b: B,
    /// Feed-forward out `[h, i]`.
    pub ffn_w: B,
    /// `[h]`.
    pub ffn_b: B,
    /// Output layer norm.
    pub ln2_g: B,
    /// Output layer norm bias.
    pub ln2_b: B,
}

/// The encoder's weights (f16).
#[derive(Debug, Clone)]
pub struct Weights<B> {
    /// Word embeddings `[vocab, h]`.
    pub word: B,
    /// Position embeddings `[positions, h]`.
    pub position: B,
    /// Token-type embedding of type 0 `[h]` (every input here is one segment).
    pub kind: B,
    /// Embedding layer norm.
    pub ln_g: B,
    /// Embedding layer norm bias.
    pub ln_b: B,
    /// Encoder layers.
    pub layers: Vec<Layer<B>>,
}

impl<B> Weights<B> {
    /// The same weights in other buffers.
    pub fn try_map<C, E>(self, mut f: impl FnMut(B) -> Result<C, E>) -> Result<Weights<C>, E> {
        let mut layers = Vec::with_capacity(self.layers.len());
        for l in self.layers {
            layers.push(Layer {
                qkv_w: f(l.qkv_w)?,
                qkv_b: f(l.qkv_b)?,
                out_w: f(l.out_w)?,
                out_b: f(l.out_b)?,
                ln1_g: f(l.ln1_g)?,
                ln1_b: f(l.ln1_b)?,
                inter_w: f(l.inter_w)?,
                inter_b: f(l.inter_b)?,
                ffn_w: f(l.ffn_w)?,
                ffn_b: f(l.ffn_b)?,
                ln2_g: f(l.ln2_g)?,
                ln2_b: f(l.ln2_b)?,
            });
        }
        Ok(Weights {
            word: f(self.word)?,
            position: f(self.position)?,
            kind: f(self.kind)?,
            ln_g: f(self.ln_g)?,
            ln_b: f(self.ln_b)?,
            layers,
        })
    }
}

/// Host-side weights (f32), as loaded from the safetensors file.
pub type HostWeights = Weights<Vec<f32>>;

/// Why the weights could not be loaded ([`super::load_weights`], for either path).
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The file could not be read, or a tensor not converted to f32.
    #[error("weights: {0}")]
    Read(#[from] candle_core::Error),
    /// A tensor the model needs is not in the file.
    #[error("weights: no tensor {0}")]
    MissingTensor(String),
    /// A tensor is smaller than the configuration says.
    #[error("unsupported model: {0}")]
    Unsupported(String),
}

/// What a device must do for the forward pass. Every kernel reads f16, computes in f32 and
/// stores f16 (the pooled vectors: f32).
pub trait Ops {
    /// A buffer of f16.
    type Half;
    /// A buffer of f32.
    type Float;
    /// A buffer of u32 (token ids, attention mask).
    type Index;
    /// Failures.
    type Error;

    /// `len` zeroed f16.
    fn half(&self, len: usize) -> Result<Self::Half, Self::Error>;
    /// `len` zeroed f32.
    fn float(&self, len: usize) -> Result<Self::Float, Self::Error>;
    /// A copy of `values` on the device.
    fn index(&self, values: &[u32]) -> Result<Self::Index, Self::Error>;
    /// `buffer` back on the host.
    fn download(&self, buffer: &Self::Float) -> Result<Vec<f32>, Self::Error>;

    /// `g` with f16 operands and an f16 result (f32 accumulation).
    fn gemm_half(
        &self,
        g: &Gemm,
        a: &Self::Half,
        b: &Self::Half,
        c: &mut Self::Half,
    ) -> Result<(), Self::Error>;
    /// `g` with f16 operands and an f32 result.
    fn gemm_float(
        &self,
        g: &Gemm,
        a: &Self::Half,
        b: &Self::Half,
        c: &mut Self::Float,
    ) -> Result<(), Self::Error>;

    /// `out[t] = LN(word[ids[t]] + position[t % seq] + kind)`.
    #[allow(clippy::too_many_arguments)]
    fn embed(
        &self,
        ids: &Self::Index,
        tokens: usize,
        seq: usize,
        w: &Weights<Self::Half>,
        out: &mut Self::Half,
    ) -> Result<(), Self::Error>;
    /// `qkv [t, 3h] + bias` split into `q`, `k`, `v` `[n, heads, seq, d]`.
    #[allow(clippy::too_many_arguments)]
    fn split_heads(
        &self,
        qkv: &Self::Half,
        bias: &Self::Half,
        tokens: usize,
        seq: usize,
        q: &mut Self::Half,
        k: &mut Self::Half,
        v: &mut Self::Half,
    ) -> Result<(), Self::Error>;
    /// Row-wise softmax of `scores [n·heads·seq, seq]` over the keys whose `mask` (`[n, seq]`)
    /// is 1; masked keys get probability 0.
    fn softmax(
        &self,
        scores: &Self::Float,
        mask: &Self::Index,
        sequences: usize,
        seq: usize,
        probs: &mut Self::Half,
    ) -> Result<(), Self::Error>;
    /// `ctx [n, heads, seq, d]` back to `[t, h]`.
    fn merge_heads(
        &self,
        ctx: &Self::Half,
        tokens: usize,
        seq: usize,
        out: &mut Self::Half,
    ) -> Result<(), Self::Error>;
    /// `out = LN(x + bias + residual)` over rows of `h`.
    #[allow(clippy::too_many_arguments)]
    fn bias_residual_norm(
        &self,
        x: &Self::Half,
        bias: &Self::Half,
        residual: &Self::Half,
        gamma: &Self::Half,
        beta: &Self::Half,
        tokens: usize,
        out: &mut Self::Half,
    ) -> Result<(), Self::Error>;
    /// `x = gelu(x + bias)` (the erf form) in place, rows of `cols`.
    fn bias_gelu(
        &self,
        x: &mut Self::Half,
        bias: &Self::Half,
        tokens: usize,
        cols: usize,
    ) -> Result<(), Self::Error>;
    /// Masked mean over each sequence's tokens, then L2-normalised: `[n, h]` f32.
    fn pool(
        &self,
        x: &Self::Half,
        mask: &Self::Index,
        sequences: usize,
        seq: usize,
        out: &mut Self::Float,
    ) -> Result<(), Self::Error>;
}

/// Why [`forward`] refuses an input before any device work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// `ids`/`mask` are not `sequences × seq` long, or empty.
    #[error("{ids} ids and {mask} mask values for {sequences} sequences of {seq}")]
    Shape {
        /// Ids given.
        ids: usize,
        /// Mask values given.
        mask: usize,
        /// Sequences.
        sequences: usize,
        /// Tokens per sequence.
        seq: usize,
    },
    /// Longer than the model's position embeddings.
    #[error("sequences of {seq} tokens (the model has {positions} positions)")]
    TooLong {
        /// Tokens per sequence.
        seq: usize,
        /// Positions of the model.
        positions: usize,
    },
}

/// The unit vectors of `sequences` inputs of `seq` tokens each (`ids` and `mask` row-major
/// `[sequences, seq]`, padding on the right with mask 0). The sizes are checked first: the
/// kernels index positions, ids and the mask by them.
pub fn forward<O: Ops>(
    ops: &O,
    dims: &Dims,
    w: &Weights<O::Half>,
    ids: &[u32],
    mask: &[u32],
    sequences: usize,
    seq: usize,
) -> Result<Vec<Vec<f32>>, O::Error>
where
    O::Error: From<InputError>,
{
    let tokens = sequences.saturating_mul(seq);
    if tokens == 0 || ids.len() != tokens || mask.len() != tokens {
        return Err(InputError::Shape {
            ids: ids.len(),
            mask: mask.len(),
            sequences,
            seq,
        }
        .into());
    }
    if seq > dims.positions {
        return Err(InputError::TooLong {
            seq,
            positions: dims.positions,
        }
        .into());
    }
    let (h, heads, d, inter) = (dims.hidden, dims.heads, dims.head(), dims.intermediate);
    let t = sequences * seq;
    let ids = ops.index(ids)?;
    let mask = ops.index(mask)?;
    let mut x = ops.half(t * h)?;
    let mut x1 = ops.half(t * h)?;
    let mut qkv = ops.half(t * 3 * h)?;
    let mut q = ops.half(t * h)?;
    let mut k = ops.half(t * h)?;
    let mut v = ops.half(t * h)?;
    let mut scores = ops.float(sequences * heads * seq * seq)?;
    let mut probs = ops.half(sequences * heads * seq * seq)?;
    let mut ctx = ops.half(t * h)?;
    let mut merged = ops.half(t * h)?;
    let mut proj = ops.half(t * h)?;
    let mut wide = ops.half(t * inter)?;

    ops.embed(&ids, t, seq, w, &mut x)?;
    #[allow(clippy::cast_precision_loss)]
    let scale = 1.0 / (d as f32).sqrt();
    for l in &w.layers {
        ops.gemm_half(&Gemm::linear(t, h, 3 * h), &l.qkv_w, &x, &mut qkv)?;
        ops.split_heads(&qkv, &l.qkv_b, t, seq, &mut q, &mut k, &mut v)?;
        let batch = sequences * heads;
        ops.gemm_float(&Gemm::scores(batch, seq, d, scale), &k, &q, &mut scores)?;
        ops.softmax(&scores, &mask, sequences, seq, &mut probs)?;
        ops.gemm_half(&Gemm::context(batch, seq, d), &v, &probs, &mut ctx)?;
        ops.merge_heads(&ctx, t, seq, &mut merged)?;
        ops.gemm_half(&Gemm::linear(t, h, h), &l.out_w, &merged, &mut proj)?;
        ops.bias_residual_norm(&proj, &l.out_b, &x, &l.ln1_g, &l.ln1_b, t, &mut x1)?;
        ops.gemm_half(&Gemm::linear(t, h, inter), &l.inter_w, &x1, &mut wide)?;
        ops.bias_gelu(&mut wide, &l.inter_b, t, inter)?;
        ops.gemm_half(&Gemm::linear(t, inter, h), &l.ffn_w, &wide, &mut proj)?;
        ops.bias_residual_norm(&proj, &l.ffn_b, &x1, &l.ln2_g, &l.ln2_b, t, &mut x)?;
    }
    let mut pooled = ops.float(sequences * h)?;
    ops.pool(&x, &mask, sequences, seq, &mut pooled)?;
    let flat = ops.download(&pooled)?;
    Ok(flat.chunks(h).map(<[f32]>::to_vec).collect())
}
