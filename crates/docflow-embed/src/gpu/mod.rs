//! all-MiniLM-L6-v2 on an NVIDIA GPU, with cudarc directly (no candle `cuda` feature, which
//! needs nvcc at build time): cuBLAS for the GEMMs — strided-batched for attention over every
//! (sequence, head) at once — and NVRTC-compiled kernels for the embedding lookup, layer
//! norms, the masked softmax, GELU, pooling and normalisation. Weights are f16 (from the
//! same safetensors the CPU path reads, f32 or f16), every GEMM accumulates in f32 and every
//! kernel computes in f32.
//!
//! cudarc is built with `dynamic-loading`: every build has this path, no CUDA is needed to
//! compile it, and the libraries (driver, cuBLAS, NVRTC) are looked up at run time by
//! [`probe`] before anything touches them (cudarc panics on a missing library otherwise).
//!
//! [`forward`] is the pass itself, over an [`forward::Ops`] device; the tests run it on a
//! host implementation of the same operations against candle, so its layouts are checked
//! on machines without a GPU.

mod cuda;
pub mod forward;
#[cfg(test)]
mod reference;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::bert::Config;
use half::f16;

pub use cuda::probe;
use forward::{Dims, HostWeights, Layer, Weights, WeightsError};

/// GPU failures.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No usable GPU (no driver, library or device), with the reason.
    #[error("no usable GPU: {0}")]
    Unavailable(String),
    /// The CUDA driver failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// cuBLAS failed.
    #[error("cuBLAS: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    /// NVRTC could not compile the kernels (the log is in the message).
    #[error("NVRTC: {0}")]
    Compile(#[from] cudarc::nvrtc::CompileError),
    /// A size does not fit the CUDA API's integers.
    #[error("size {0} is too large for one launch")]
    TooLarge(usize),
    /// A model this path cannot run.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// The weights could not be read or converted (a missing or short tensor included).
    #[error(transparent)]
    Weights(#[from] forward::WeightsError),
    /// The input's sizes do not fit the model.
    #[error("input: {0}")]
    Input(#[from] forward::InputError),
}

/// The encoder's sizes from its configuration.
pub fn dims(config: &Config) -> Dims {
    Dims {
        hidden: config.hidden_size,
        heads: config.num_attention_heads,
        intermediate: config.intermediate_size,
        layers: config.num_hidden_layers,
        vocab: config.vocab_size,
        positions: config.max_position_embeddings,
        #[allow(clippy::cast_possible_truncation)]
        eps: config.layer_norm_eps as f32,
    }
}

/// The weights of `file` (safetensors, f32 or f16) as f32 vectors, query/key/value fused
/// (what both paths load: the CPU path keeps them, the GPU path uploads them as f16).
pub fn load_weights(file: &Path, dims: &Dims) -> Result<HostWeights, WeightsError> {
    let mut tensors = candle_core::safetensors::load(file, &Device::Cpu)?;
    // Some exports prefix every name with the architecture.
    let prefixed: Vec<String> = tensors
        .keys()
        .filter(|k| k.starts_with("bert."))
        .cloned()
        .collect();
    for k in prefixed {
        if let Some(t) = tensors.remove(&k) {
            tensors.insert(k.trim_start_matches("bert.").to_owned(), t);
        }
    }
    let mut take = |name: &str, len: usize| -> Result<Vec<f32>, WeightsError> {
        let t: Tensor = tensors
            .remove(name)
            .ok_or_else(|| WeightsError::MissingTensor(name.to_owned()))?;
        let v = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        if v.len() < len {
            return Err(WeightsError::Unsupported(format!(
                "{name} has {} values, {len} expected",
                v.len()
            )));
        }
        Ok(v)
    };
    let h = dims.hidden;
    let mut kind = take("embeddings.token_type_embeddings.weight", h)?;
    kind.truncate(h);
    let mut weights = Weights {
        word: take("embeddings.word_embeddings.weight", dims.vocab * h)?,
        position: take("embeddings.position_embeddings.weight", dims.positions * h)?,
        kind,
        ln_g: take("embeddings.LayerNorm.weight", h)?,
        ln_b: take("embeddings.LayerNorm.bias", h)?,
        layers: Vec::with_capacity(dims.layers),
    };
    for i in 0..dims.layers {
        let p = format!("encoder.layer.{i}");
        let mut qkv_w = take(&format!("{p}.attention.self.query.weight"), h * h)?;
        qkv_w.extend(take(&format!("{p}.attention.self.key.weight"), h * h)?);
        qkv_w.extend(take(&format!("{p}.attention.self.value.weight"), h * h)?);
        let mut qkv_b = take(&format!("{p}.attention.self.query.bias"), h)?;
        qkv_b.extend(take(&format!("{p}.attention.self.key.bias"), h)?);
        qkv_b.extend(take(&format!("{p}.attention.self.value.bias"), h)?);
        let inter = dims.intermediate;
        weights.layers.push(Layer {
            qkv_w,
            qkv_b,
            out_w: take(&format!("{p}.attention.output.dense.weight"), h * h)?,
            out_b: take(&format!("{p}.attention.output.dense.bias"), h)?,
            ln1_g: take(&format!("{p}.attention.output.LayerNorm.weight"), h)?,
            ln1_b: take(&format!("{p}.attention.output.LayerNorm.bias"), h)?,
            inter_w: take(&format!("{p}.intermediate.dense.weight"), inter * h)?,
            inter_b: take(&format!("{p}.intermediate.dense.bias"), inter)?,
            ffn_w: take(&format!("{p}.output.dense.weight"), h * inter)?,
            ffn_b: take(&format!("{p}.output.dense.bias"), h)?,
            ln2_g: take(&format!("{p}.output.LayerNorm.weight"), h)?,
            ln2_b: take(&format!("{p}.output.LayerNorm.bias"), h)?,
        });
    }
    Ok(weights)
}

/// Writes `src`'s model as f16 safetensors to `dst` (half the size: what is carried to a
/// GPU machine), with its tokenizer and configuration.
pub fn export_f16(src: &Path, dst: &Path) -> Result<u64, crate::EmbedError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| crate::EmbedError::ModelFile { path, source }
    };
    std::fs::create_dir_all(dst).map_err(io(dst))?;
    let tensors = candle_core::safetensors::load(src.join("model.safetensors"), &Device::Cpu)?;
    let mut half: HashMap<String, Tensor> = HashMap::with_capacity(tensors.len());
    for (name, t) in tensors {
        let t = if t.dtype().is_float() {
            t.to_dtype(DType::F16)?
        } else {
            t
        };
        half.insert(name, t);
    }
    let out = dst.join("model.safetensors");
    candle_core::safetensors::save(&half, &out)?;
    for file in ["tokenizer.json", "config.json"] {
        std::fs::copy(src.join(file), dst.join(file)).map_err(io(&src.join(file)))?;
    }
    Ok(std::fs::metadata(&out).map_err(io(&out))?.len())
}

/// The model on one GPU.
#[derive(Debug)]
pub struct GpuModel {
    ops: cuda::CudaOps,
    weights: Weights<cudarc::driver::CudaSlice<u16>>,
    dims: Dims,
    name: String,
}

impl GpuModel {
    /// Loads `dir`'s `model.safetensors` onto GPU `ordinal` (call [`probe`] first).
    pub fn load(dir: &Path, config: &Config, ordinal: usize) -> Result<Self, GpuError> {
        let dims = dims(config);
        let host = load_weights(&dir.join("model.safetensors"), &dims)?;
        let ops = cuda::CudaOps::new(ordinal, dims)?;
        let weights = host.try_map(|v| {
            let bits: Vec<u16> = v.iter().map(|x| f16::from_f32(*x).to_bits()).collect();
            ops.upload(&bits)
        })?;
        let name = format!("cuda:{ordinal} ({})", ops.device_name());
        Ok(GpuModel {
            ops,
            weights,
            dims,
            name,
        })
    }

    /// `cuda:N (device name)`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Unit vectors of `sequences` inputs padded to `seq` tokens (`ids`, `mask` row-major).
    pub fn embed(
        &self,
        ids: &[u32],
        mask: &[u32],
        sequences: usize,
        seq: usize,
    ) -> Result<Vec<Vec<f32>>, GpuError> {
        self.ops.bind()?;
        forward::forward(
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

impl Drop for GpuModel {
    fn drop(&mut self) {
        // The buffers and the cuBLAS handle are freed next, possibly on a thread where this
        // context is not current.
        let _ = self.ops.bind();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{embedder, model_dir, reference};

    fn config() -> Config {
        let bytes = std::fs::read(model_dir().join("config.json")).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// The GPU path's operations, run on the host with cuBLAS's column-major GEMM semantics
    /// (a naive loop, independent of the CPU path's candle products) and the device's fp16
    /// rounding, give sentence-transformers' vectors and the CPU path's: every GEMM's layout,
    /// transpose and stride, the fused QKV, the head split and merge, the masks and the
    /// pooling are right, and f16 storage costs less than 1e-4 of cosine.
    #[test]
    fn the_gpu_pass_in_f16_on_the_host_equals_sentence_transformers() {
        let config = config();
        let dims = dims(&config);
        let weights = reference::as_f16(
            &load_weights(&model_dir().join("model.safetensors"), &dims).unwrap(),
        );
        let model = embedder();
        // Short texts of different lengths: one padded batch.
        let cases: Vec<_> = reference()
            .into_iter()
            .filter(|(_, ids, _)| ids.len() <= 24)
            .take(4)
            .collect();
        assert!(cases.len() >= 3);
        let seq = cases.iter().map(|c| c.1.len()).max().unwrap();
        let mut ids = Vec::new();
        let mut mask = Vec::new();
        for (_, case_ids, _) in &cases {
            ids.extend(case_ids.iter().copied());
            mask.extend(std::iter::repeat_n(1u32, case_ids.len()));
            ids.extend(std::iter::repeat_n(0u32, seq - case_ids.len()));
            mask.extend(std::iter::repeat_n(0u32, seq - case_ids.len()));
        }
        let ops = reference::HostOps::new(dims);
        let got = forward::forward(&ops, &dims, &weights, &ids, &mask, cases.len(), seq).unwrap();
        let texts: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
        let cpu = model.embed(&texts).unwrap();
        for (((text, _, st), gpu), cpu) in cases.iter().zip(&got).zip(&cpu) {
            let c = crate::cosine(gpu, cpu);
            assert!(
                c >= 0.9999,
                "fp16 pass vs the CPU path: cosine {c} for {text:?}"
            );
            assert!(
                crate::cosine(gpu, st) >= 0.9999,
                "vs sentence-transformers: {text:?}"
            );
        }
        // Attention went through the strided-batched GEMMs: 2 per layer over n × heads.
        let batched = ops
            .gemms
            .borrow()
            .iter()
            .filter(|g| g.batch == cases.len() * dims.heads)
            .count();
        assert_eq!(batched, 2 * dims.layers);
    }

    /// On a machine with a GPU: the GPU path's vectors equal the CPU path's (one padded
    /// batch of every reference text, and each alone). Elsewhere the test says why it did
    /// not run; `bench/gpu/check.sh` runs the same comparison from a carried binary.
    #[test]
    fn gpu_vectors_equal_cpu() {
        if let Err(why) = probe(0) {
            eprintln!("gpu_vectors_equal_cpu: SKIPPED, no GPU on this machine: {why}");
            return;
        }
        let gpu = crate::Embedder::load(&model_dir(), "cuda:0").unwrap();
        let cpu = embedder();
        let cases = reference();
        let texts: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
        let want = cpu.embed(&texts).unwrap();
        let got = gpu.embed(&texts).unwrap();
        for ((text, w), g) in texts.iter().zip(&want).zip(&got) {
            let c = crate::cosine(g, w);
            assert!(c >= 0.9999, "GPU vs CPU cosine {c} for {text:?}");
            let alone = gpu.embed(&[text]).unwrap().remove(0);
            assert!(crate::cosine(&alone, w) >= 0.9999, "alone: {text:?}");
        }
    }

    #[test]
    fn devices_parse_and_a_missing_gpu_is_named() {
        use crate::DeviceChoice;
        assert_eq!(DeviceChoice::parse("auto").unwrap(), DeviceChoice::Auto);
        assert_eq!(DeviceChoice::parse("CPU").unwrap(), DeviceChoice::Cpu);
        assert_eq!(DeviceChoice::parse("cuda").unwrap(), DeviceChoice::Cuda(0));
        assert_eq!(
            DeviceChoice::parse("cuda:3").unwrap(),
            DeviceChoice::Cuda(3)
        );
        assert!(DeviceChoice::parse("tpu").is_err());
        assert!(DeviceChoice::parse("cuda:x").is_err());
        if probe(0).is_err() {
            // auto falls back to the CPU and says why; cuda fails with the reason.
            let auto = crate::Embedder::load(&model_dir(), "auto").unwrap();
            assert_eq!(auto.device(), "cpu");
            assert!(
                auto.device_reason().contains("no usable GPU"),
                "{}",
                auto.device_reason()
            );
            let err = crate::Embedder::load(&model_dir(), "cuda:0").unwrap_err();
            assert!(err.to_string().contains("no usable GPU"), "{err}");
        }
    }

    /// Sizes the kernels would index past are refused before any device work.
    #[test]
    fn inputs_that_do_not_fit_are_refused() {
        let dims = dims(&config());
        let weights = load_weights(&model_dir().join("model.safetensors"), &dims).unwrap();
        let ops = reference::HostOps::new(dims);
        let run = |ids: &[u32], mask: &[u32], n, seq| {
            forward::forward(&ops, &dims, &weights, ids, mask, n, seq).unwrap_err()
        };
        assert!(matches!(
            run(&[101, 102], &[1, 1], 1, 3),
            forward::InputError::Shape { .. }
        ));
        assert!(matches!(
            run(&[101, 102], &[1], 1, 2),
            forward::InputError::Shape { .. }
        ));
        assert!(matches!(
            run(&[], &[], 0, 0),
            forward::InputError::Shape { .. }
        ));
        let long = vec![101u32; 513];
        assert!(matches!(
            run(&long, &vec![1; 513], 1, 513),
            forward::InputError::TooLong { positions: 512, .. }
        ));
    }

    #[test]
    fn f16_export_halves_the_file_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let size = export_f16(&model_dir(), dir.path()).unwrap();
        let original = std::fs::metadata(model_dir().join("model.safetensors"))
            .unwrap()
            .len();
        assert!(size < original * 6 / 10, "{size} vs {original}");
        let dims = dims(&config());
        let w = load_weights(&dir.path().join("model.safetensors"), &dims).unwrap();
        assert_eq!(w.layers.len(), 6);
        assert_eq!(w.layers[0].qkv_w.len(), 3 * 384 * 384);
        // The CPU path reads the f16 file too (widened to f32).
        let cpu = crate::Embedder::load(dir.path(), "cpu").unwrap();
        let (text, _, want) = reference().remove(2);
        let got = cpu.embed(&[text.as_str()]).unwrap().remove(0);
        assert!(crate::cosine(&got, &want) >= 0.999, "{text:?}");
    }
}
