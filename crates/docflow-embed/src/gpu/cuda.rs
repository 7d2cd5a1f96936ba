//! [`Ops`] on an NVIDIA GPU through cudarc: cuBLAS `GemmEx` / `GemmStridedBatchedEx` with f16
//! operands and f32 accumulation (`CUBLAS_COMPUTE_32F`), and NVRTC-compiled kernels for
//! everything between the GEMMs. f16 is carried as its bit pattern (`u16`) and converted with
//! PTX `cvt`, so the kernels need no CUDA headers at run time.
//!
//! This is the only module of the workspace with `unsafe`: kernel launches and the raw cuBLAS
//! calls. Each block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_longlong, c_void};
use std::sync::Arc;

use cudarc::cublas::{CudaBlas, result as blas, sys as blas_sys};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};

use super::GpuError;
use super::forward::{Dims, Gemm, Ops, Trans, Weights};

/// Threads of the row kernels (layer norms, pooling): each handles `hidden / 128` columns.
const ROW_THREADS: u32 = 128;
/// Threads of the element-wise kernels.
const ELEMENT_THREADS: u32 = 256;
/// Threads of the softmax (one block per row of scores).
const SOFTMAX_THREADS: u32 = 128;

/// The kernels, specialised to the model's sizes at load.
fn kernel_source(dims: &Dims) -> String {
    format!(
        r#"
typedef unsigned short half_t;
typedef unsigned long long idx_t;
#define HIDDEN {hidden}
#define HEADS {heads}
#define HEAD_DIM {head}
#define ROW_THREADS {row_threads}
#define PER_THREAD (HIDDEN / ROW_THREADS)

__device__ __forceinline__ float h2f(half_t h) {{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}}

__device__ __forceinline__ half_t f2h(float f) {{
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}}

// The sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float block_sum(float v) {{
    __shared__ float partial[32];
    __shared__ float total;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {{
        float s = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) total = s;
    }}
    __syncthreads();
    return total;
}}

__device__ float block_max(float v) {{
    __shared__ float partial[32];
    __shared__ float total;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {{
        float s = lane < (int)(blockDim.x >> 5) ? partial[lane] : -3.402823466e38f;
        for (int o = 16; o > 0; o >>= 1) s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
        if (lane == 0) total = s;
    }}
    __syncthreads();
    return total;
}}

// Layer norm of the row this block holds (PER_THREAD values a thread), two-pass in f32.
__device__ void norm_store(const float* v, const half_t* gamma, const half_t* beta, float eps,
                           half_t* out) {{
    float s = 0.0f;
    for (int i = 0; i < PER_THREAD; i++) s += v[i];
    float mean = block_sum(s) / HIDDEN;
    float q = 0.0f;
    for (int i = 0; i < PER_THREAD; i++) {{ float c = v[i] - mean; q += c * c; }}
    float inv = rsqrtf(block_sum(q) / HIDDEN + eps);
    for (int i = 0; i < PER_THREAD; i++) {{
        int c = threadIdx.x + i * ROW_THREADS;
        out[c] = f2h((v[i] - mean) * inv * h2f(gamma[c]) + h2f(beta[c]));
    }}
}}

// One block per token: word + position + type-0 embeddings, layer norm.
extern "C" __global__ void embed(const unsigned int* ids, int seq, int vocab, const half_t* word,
                                 const half_t* position, const half_t* kind, const half_t* gamma,
                                 const half_t* beta, float eps, half_t* out) {{
    idx_t t = blockIdx.x;
    idx_t p = t % seq;
    idx_t id = ids[t];
    if (id >= (idx_t)vocab) id = 0;
    float v[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) {{
        int c = threadIdx.x + i * ROW_THREADS;
        v[i] = h2f(word[id * HIDDEN + c]) + h2f(position[p * HIDDEN + c]) + h2f(kind[c]);
    }}
    norm_store(v, gamma, beta, eps, out + t * HIDDEN);
}}

// One block per token: layer norm of x + bias + residual.
extern "C" __global__ void bias_residual_norm(const half_t* x, const half_t* bias,
                                              const half_t* residual, const half_t* gamma,
                                              const half_t* beta, float eps, half_t* out) {{
    idx_t row = (idx_t)blockIdx.x * HIDDEN;
    float v[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) {{
        int c = threadIdx.x + i * ROW_THREADS;
        v[i] = h2f(x[row + c]) + h2f(bias[c]) + h2f(residual[row + c]);
    }}
    norm_store(v, gamma, beta, eps, out + row);
}}

// qkv [t, 3h] + bias -> q, k, v [n, heads, seq, d].
extern "C" __global__ void split_heads(const half_t* qkv, const half_t* bias, idx_t tokens,
                                       int seq, half_t* q, half_t* k, half_t* v) {{
    idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= tokens * 3 * HIDDEN) return;
    idx_t t = i / (3 * HIDDEN);
    int c = (int)(i % (3 * HIDDEN));
    int which = c / HIDDEN, r = c % HIDDEN;
    int head = r / HEAD_DIM, j = r % HEAD_DIM;
    idx_t s = t / seq, p = t % seq;
    idx_t dst = ((s * HEADS + head) * seq + p) * HEAD_DIM + j;
    half_t value = f2h(h2f(qkv[i]) + h2f(bias[c]));
    if (which == 0) q[dst] = value;
    else if (which == 1) k[dst] = value;
    else v[dst] = value;
}}

// One block per row of scores (a query of a head of a sequence): softmax over its keys whose
// mask is 1; masked keys get 0.
extern "C" __global__ void softmax(const float* scores, const unsigned int* mask, int seq,
                                   half_t* probs) {{
    idx_t row = blockIdx.x;
    idx_t s = row / ((idx_t)HEADS * seq);
    const float* r = scores + row * seq;
    const unsigned int* keys = mask + s * seq;
    float m = -3.402823466e38f;
    for (int j = threadIdx.x; j < seq; j += blockDim.x)
        if (keys[j]) m = fmaxf(m, r[j]);
    m = block_max(m);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < seq; j += blockDim.x)
        if (keys[j]) sum += expf(r[j] - m);
    float inv = 1.0f / block_sum(sum);
    for (int j = threadIdx.x; j < seq; j += blockDim.x)
        probs[row * seq + j] = f2h(keys[j] ? expf(r[j] - m) * inv : 0.0f);
}}

// ctx [n, heads, seq, d] -> [t, h].
extern "C" __global__ void merge_heads(const half_t* ctx, idx_t tokens, int seq, half_t* out) {{
    idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= tokens * HIDDEN) return;
    idx_t t = i / HIDDEN;
    int c = (int)(i % HIDDEN);
    int head = c / HEAD_DIM, j = c % HEAD_DIM;
    idx_t s = t / seq, p = t % seq;
    out[i] = ctx[((s * HEADS + head) * seq + p) * HEAD_DIM + j];
}}

// x = gelu(x + bias), erf form, rows of cols.
extern "C" __global__ void bias_gelu(half_t* x, const half_t* bias, idx_t total, int cols) {{
    idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float v = h2f(x[i]) + h2f(bias[i % cols]);
    x[i] = f2h(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
}}

// One block per sequence: mean over its real tokens, then unit length (f32 out).
extern "C" __global__ void pool(const half_t* x, const unsigned int* mask, int seq, float* out) {{
    idx_t s = blockIdx.x;
    float acc[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) acc[i] = 0.0f;
    float count = 0.0f;
    for (int p = 0; p < seq; p++) {{
        if (!mask[s * seq + p]) continue;
        count += 1.0f;
        const half_t* row = x + (s * seq + p) * HIDDEN;
        for (int i = 0; i < PER_THREAD; i++) acc[i] += h2f(row[threadIdx.x + i * ROW_THREADS]);
    }}
    count = fmaxf(count, 1e-9f);
    float q = 0.0f;
    for (int i = 0; i < PER_THREAD; i++) {{ acc[i] /= count; q += acc[i] * acc[i]; }}
    float norm = fmaxf(sqrtf(block_sum(q)), 1e-12f);
    for (int i = 0; i < PER_THREAD; i++)
        out[s * HIDDEN + threadIdx.x + i * ROW_THREADS] = acc[i] / norm;
}}
"#,
        hidden = dims.hidden,
        heads = dims.heads,
        head = dims.head(),
        row_threads = ROW_THREADS,
    )
}

/// Names of the kernels in [`kernel_source`].
const KERNELS: [&str; 7] = [
    "embed",
    "bias_residual_norm",
    "split_heads",
    "softmax",
    "merge_heads",
    "bias_gelu",
    "pool",
];

/// The compiled kernels.
#[derive(Debug)]
struct Kernels {
    embed: CudaFunction,
    bias_residual_norm: CudaFunction,
    split_heads: CudaFunction,
    softmax: CudaFunction,
    merge_heads: CudaFunction,
    bias_gelu: CudaFunction,
    pool: CudaFunction,
}

/// One GPU: a stream, a cuBLAS handle on it, the kernels.
#[derive(Debug)]
pub(crate) struct CudaOps {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    kernels: Kernels,
    dims: Dims,
    /// Kept alive with the functions loaded from it.
    _module: Arc<CudaModule>,
}

fn int(v: usize) -> Result<c_int, GpuError> {
    c_int::try_from(v).map_err(|_| GpuError::TooLarge(v))
}

fn long(v: usize) -> Result<c_longlong, GpuError> {
    c_longlong::try_from(v).map_err(|_| GpuError::TooLarge(v))
}

fn grid(elements: usize, threads: u32) -> Result<LaunchConfig, GpuError> {
    let blocks = elements.div_ceil(threads as usize);
    Ok(LaunchConfig {
        grid_dim: (
            u32::try_from(blocks).map_err(|_| GpuError::TooLarge(elements))?,
            1,
            1,
        ),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

fn rows(count: usize, threads: u32) -> Result<LaunchConfig, GpuError> {
    Ok(LaunchConfig {
        grid_dim: (
            u32::try_from(count).map_err(|_| GpuError::TooLarge(count))?,
            1,
            1,
        ),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

impl CudaOps {
    /// Device `ordinal`: a context, a stream, cuBLAS, and the kernels compiled by NVRTC for its
    /// compute capability.
    pub(crate) fn new(ordinal: usize, dims: Dims) -> Result<Self, GpuError> {
        if !dims.hidden.is_multiple_of(ROW_THREADS as usize)
            || !dims.hidden.is_multiple_of(dims.heads)
        {
            return Err(GpuError::Unsupported(format!(
                "hidden size {} (the kernels need a multiple of {ROW_THREADS} split evenly over {} heads)",
                dims.hidden, dims.heads
            )));
        }
        let ctx = CudaContext::new(ordinal)?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone())?;
        let (major, minor) = ctx.compute_capability()?;
        let options = CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            ..CompileOptions::default()
        };
        let ptx = compile_ptx_with_opts(kernel_source(&dims), options)?;
        let module = ctx.load_module(ptx)?;
        let f = |name: &str| module.load_function(name);
        let kernels = Kernels {
            embed: f(KERNELS[0])?,
            bias_residual_norm: f(KERNELS[1])?,
            split_heads: f(KERNELS[2])?,
            softmax: f(KERNELS[3])?,
            merge_heads: f(KERNELS[4])?,
            bias_gelu: f(KERNELS[5])?,
            pool: f(KERNELS[6])?,
        };
        Ok(CudaOps {
            ctx,
            stream,
            blas,
            kernels,
            dims,
            _module: module,
        })
    }

    /// The device's name, for logs.
    pub(crate) fn device_name(&self) -> String {
        self.ctx
            .name()
            .unwrap_or_else(|_| format!("cuda:{}", self.ctx.ordinal()))
    }

    /// Makes the context current on the calling thread (the batcher's thread is not the one
    /// that loaded the model).
    pub(crate) fn bind(&self) -> Result<(), GpuError> {
        Ok(self.ctx.bind_to_thread()?)
    }

    /// `values` (f16 bit patterns) on the device.
    pub(crate) fn upload(&self, values: &[u16]) -> Result<CudaSlice<u16>, GpuError> {
        Ok(self.stream.clone_htod(values)?)
    }

    /// One cuBLAS GemmStridedBatchedEx: f16 A and B, C of `c_type`, f32 compute.
    fn gemm(
        &self,
        g: &Gemm,
        a: &CudaSlice<u16>,
        b: &CudaSlice<u16>,
        c_ptr: u64,
        c_type: blas_sys::cudaDataType,
    ) -> Result<(), GpuError> {
        let op = |t: Trans| match t {
            Trans::N => blas_sys::cublasOperation_t::CUBLAS_OP_N,
            Trans::T => blas_sys::cublasOperation_t::CUBLAS_OP_T,
        };
        let (a_ptr, _a_sync) = a.device_ptr(&self.stream);
        let (b_ptr, _b_sync) = b.device_ptr(&self.stream);
        let alpha = g.alpha;
        let beta = 0.0f32;
        // SAFETY: the pointers are live device allocations on this handle's stream (their
        // sync guards are held until the call is queued); `forward` sizes every buffer for
        // the m/n/k, leading dimensions, strides and batch given here; alpha and beta are
        // f32 as CUBLAS_COMPUTE_32F requires, read by cuBLAS before the call returns.
        unsafe {
            blas::gemm_strided_batched_ex(
                *self.blas.handle(),
                op(g.transa),
                op(g.transb),
                int(g.m)?,
                int(g.n)?,
                int(g.k)?,
                (&raw const alpha).cast::<c_void>(),
                a_ptr as *const c_void,
                blas_sys::cudaDataType::CUDA_R_16F,
                int(g.lda)?,
                long(g.stride_a)?,
                b_ptr as *const c_void,
                blas_sys::cudaDataType::CUDA_R_16F,
                int(g.ldb)?,
                long(g.stride_b)?,
                (&raw const beta).cast::<c_void>(),
                c_ptr as *mut c_void,
                c_type,
                int(g.ldc)?,
                long(g.stride_c)?,
                int(g.batch)?,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )?;
        }
        Ok(())
    }
}

impl Ops for CudaOps {
    type Half = CudaSlice<u16>;
    type Float = CudaSlice<f32>;
    type Index = CudaSlice<u32>;
    type Error = GpuError;

    fn half(&self, len: usize) -> Result<CudaSlice<u16>, GpuError> {
        Ok(self.stream.alloc_zeros::<u16>(len.max(1))?)
    }
    fn float(&self, len: usize) -> Result<CudaSlice<f32>, GpuError> {
        Ok(self.stream.alloc_zeros::<f32>(len.max(1))?)
    }
    fn index(&self, values: &[u32]) -> Result<CudaSlice<u32>, GpuError> {
        Ok(self.stream.clone_htod(values)?)
    }
    fn download(&self, buffer: &CudaSlice<f32>) -> Result<Vec<f32>, GpuError> {
        Ok(self.stream.clone_dtoh(buffer)?)
    }

    fn gemm_half(
        &self,
        g: &Gemm,
        a: &CudaSlice<u16>,
        b: &CudaSlice<u16>,
        c: &mut CudaSlice<u16>,
    ) -> Result<(), GpuError> {
        let (c_ptr, _c_sync) = c.device_ptr_mut(&self.stream);
        self.gemm(g, a, b, c_ptr, blas_sys::cudaDataType::CUDA_R_16F)
    }
    fn gemm_float(
        &self,
        g: &Gemm,
        a: &CudaSlice<u16>,
        b: &CudaSlice<u16>,
        c: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let (c_ptr, _c_sync) = c.device_ptr_mut(&self.stream);
        self.gemm(g, a, b, c_ptr, blas_sys::cudaDataType::CUDA_R_32F)
    }

    fn embed(
        &self,
        ids: &CudaSlice<u32>,
        tokens: usize,
        seq: usize,
        w: &Weights<CudaSlice<u16>>,
        out: &mut CudaSlice<u16>,
    ) -> Result<(), GpuError> {
        let (seq, vocab, eps) = (int(seq)?, int(self.dims.vocab)?, self.dims.eps);
        let mut b = self.stream.launch_builder(&self.kernels.embed);
        b.arg(ids)
            .arg(&seq)
            .arg(&vocab)
            .arg(&w.word)
            .arg(&w.position);
        b.arg(&w.kind).arg(&w.ln_g).arg(&w.ln_b).arg(&eps).arg(out);
        // SAFETY: the arguments match `embed`'s parameters in type and order; `ids` holds
        // `tokens` ids (clamped below vocab in the kernel), `out` `tokens × hidden` values,
        // and one block of ROW_THREADS threads per token covers each row exactly.
        unsafe { b.launch(rows(tokens, ROW_THREADS)?) }?;
        Ok(())
    }

    fn split_heads(
        &self,
        qkv: &CudaSlice<u16>,
        bias: &CudaSlice<u16>,
        tokens: usize,
        seq: usize,
        q: &mut CudaSlice<u16>,
        k: &mut CudaSlice<u16>,
        v: &mut CudaSlice<u16>,
    ) -> Result<(), GpuError> {
        let (count, seq_i) = (tokens as u64, int(seq)?);
        let mut b = self.stream.launch_builder(&self.kernels.split_heads);
        b.arg(qkv)
            .arg(bias)
            .arg(&count)
            .arg(&seq_i)
            .arg(q)
            .arg(k)
            .arg(v);
        // SAFETY: matching parameters; the kernel bounds its index by tokens × 3 × hidden,
        // the size of `qkv`, and writes each of q, k, v (tokens × hidden) once per element.
        unsafe { b.launch(grid(tokens * 3 * self.dims.hidden, ELEMENT_THREADS)?) }?;
        Ok(())
    }

    fn softmax(
        &self,
        scores: &CudaSlice<f32>,
        mask: &CudaSlice<u32>,
        sequences: usize,
        seq: usize,
        probs: &mut CudaSlice<u16>,
    ) -> Result<(), GpuError> {
        let seq_i = int(seq)?;
        let mut b = self.stream.launch_builder(&self.kernels.softmax);
        b.arg(scores).arg(mask).arg(&seq_i).arg(probs);
        // SAFETY: matching parameters; one block per row of `seq` scores, rows =
        // sequences × heads × seq, which is how `forward` sized scores and probs; the mask
        // has sequences × seq entries.
        unsafe { b.launch(rows(sequences * self.dims.heads * seq, SOFTMAX_THREADS)?) }?;
        Ok(())
    }

    fn merge_heads(
        &self,
        ctx: &CudaSlice<u16>,
        tokens: usize,
        seq: usize,
        out: &mut CudaSlice<u16>,
    ) -> Result<(), GpuError> {
        let (count, seq_i) = (tokens as u64, int(seq)?);
        let mut b = self.stream.launch_builder(&self.kernels.merge_heads);
        b.arg(ctx).arg(&count).arg(&seq_i).arg(out);
        // SAFETY: matching parameters; the index is bounded by tokens × hidden, the size of
        // both buffers.
        unsafe { b.launch(grid(tokens * self.dims.hidden, ELEMENT_THREADS)?) }?;
        Ok(())
    }

    fn bias_residual_norm(
        &self,
        x: &CudaSlice<u16>,
        bias: &CudaSlice<u16>,
        residual: &CudaSlice<u16>,
        gamma: &CudaSlice<u16>,
        beta: &CudaSlice<u16>,
        tokens: usize,
        out: &mut CudaSlice<u16>,
    ) -> Result<(), GpuError> {
        let eps = self.dims.eps;
        let mut b = self.stream.launch_builder(&self.kernels.bias_residual_norm);
        b.arg(x)
            .arg(bias)
            .arg(residual)
            .arg(gamma)
            .arg(beta)
            .arg(&eps)
            .arg(out);
        // SAFETY: matching parameters; one block per token row of `hidden` values in x,
        // residual and out (distinct buffers), bias/gamma/beta of `hidden`.
        unsafe { b.launch(rows(tokens, ROW_THREADS)?) }?;
        Ok(())
    }

    fn bias_gelu(
        &self,
        x: &mut CudaSlice<u16>,
        bias: &CudaSlice<u16>,
        tokens: usize,
        cols: usize,
    ) -> Result<(), GpuError> {
        let (total, cols_i) = ((tokens * cols) as u64, int(cols)?);
        let mut b = self.stream.launch_builder(&self.kernels.bias_gelu);
        b.arg(x).arg(bias).arg(&total).arg(&cols_i);
        // SAFETY: matching parameters; the index is bounded by tokens × cols, the size of
        // x; bias has cols values.
        unsafe { b.launch(grid(tokens * cols, ELEMENT_THREADS)?) }?;
        Ok(())
    }

    fn pool(
        &self,
        x: &CudaSlice<u16>,
        mask: &CudaSlice<u32>,
        sequences: usize,
        seq: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let seq_i = int(seq)?;
        let mut b = self.stream.launch_builder(&self.kernels.pool);
        b.arg(x).arg(mask).arg(&seq_i).arg(out);
        // SAFETY: matching parameters; one block per sequence reading its seq × hidden
        // values and seq mask entries, writing its `hidden` outputs.
        unsafe { b.launch(rows(sequences, ROW_THREADS)?) }?;
        Ok(())
    }
}

/// Whether GPU `ordinal` can run the model: the driver, cuBLAS and NVRTC libraries are
/// found and the device exists. Nothing CUDA is touched before the libraries are known to
/// load (cudarc would panic on a missing one).
pub fn probe(ordinal: usize) -> Result<(), GpuError> {
    let missing = |what: &str| {
        GpuError::Unavailable(format!(
            "{what} not found (CUDA 13: put its lib directory on LD_LIBRARY_PATH)"
        ))
    };
    // SAFETY: each call only tries to dlopen the library by its usual names and closes it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(GpuError::Unavailable(
            "no NVIDIA driver (libcuda.so not found)".into(),
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Err(missing("libcublas"));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(missing("libnvrtc"));
    }
    let count = CudaContext::device_count()
        .map_err(|e| GpuError::Unavailable(format!("the CUDA driver reports no device ({e})")))?;
    let count = usize::try_from(count).unwrap_or(0);
    if ordinal >= count {
        return Err(GpuError::Unavailable(format!(
            "cuda:{ordinal} asked for; the driver reports {count} device(s)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels compile with the real NVRTC where its library is found (it needs no GPU
    /// or driver: a CUDA 13 NVRTC on LD_LIBRARY_PATH is enough), for Hopper's compute
    /// capability, and every kernel the launcher names is in the module's PTX.
    #[test]
    fn kernels_compile_with_nvrtc() {
        // SAFETY: only tries to dlopen libnvrtc.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("kernels_compile_with_nvrtc: SKIPPED, libnvrtc not found on this machine");
            return;
        }
        let dims = Dims {
            hidden: 384,
            heads: 12,
            intermediate: 1536,
            layers: 6,
            vocab: 30522,
            positions: 512,
            eps: 1e-12,
        };
        let options = CompileOptions {
            options: vec!["--gpu-architecture=compute_90".into()],
            ..CompileOptions::default()
        };
        let ptx = compile_ptx_with_opts(kernel_source(&dims), options).unwrap();
        let text = ptx.to_src();
        for name in KERNELS {
            assert!(
                text.contains(&format!(".entry {name}(")),
                "{name} missing from the PTX"
            );
        }
    }
}
