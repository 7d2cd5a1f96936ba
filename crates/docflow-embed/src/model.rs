//! The model: tokenizer, the encoder on the CPU ([`crate::host`]) or a GPU ([`crate::gpu`]), sentence-transformers' pooling.

use std::path::Path;

use candle_transformers::models::bert::Config;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::EmbedError;
use crate::chunk::{self, Chunk};

/// Dimensions of a vector.
pub const DIMENSIONS: usize = 384;

/// Longest input in tokens, `[CLS]` and `[SEP]` included (sentence-transformers'
/// `max_seq_length` for this model); longer text is truncated.
pub const MAX_TOKENS: usize = 256;

/// Cosine similarity of two vectors (of unit length for this crate's vectors: the dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// Where the model runs.
enum Backend {
    /// The host encoder ([`crate::host`]), f32.
    Cpu(Box<crate::host::HostModel>),
    /// The cudarc path, f16 weights with f32 accumulation.
    Cuda(Box<crate::gpu::GpuModel>),
}

/// What `--device` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The GPU when one is usable, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// GPU N; an error when it cannot be used.
    Cuda(usize),
}

impl DeviceChoice {
    /// Parses `auto`, `cpu`, `cuda` or `cuda:N`.
    pub fn parse(s: &str) -> Result<Self, EmbedError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" | "gpu" => Ok(DeviceChoice::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| {
                    EmbedError::Device(s.to_owned(), "expected auto, cpu, cuda or cuda:N".into())
                }),
        }
    }
}

/// all-MiniLM-L6-v2 on the CPU (candle) or a GPU (cudarc), with its tokenizer.
pub struct Embedder {
    backend: Backend,
    /// Truncating at [`MAX_TOKENS`], padding to the longest of a batch: for the model.
    tokenizer: Tokenizer,
    /// Neither truncating nor padding: for counting and chunking.
    plain: Tokenizer,
    /// `cpu` or `cuda:N (name)`.
    device: String,
    /// Why this device (for the start-up log line).
    reason: String,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|source| EmbedError::ModelFile {
        path: path.to_owned(),
        source,
    })
}

fn tok_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Tokenizer(e.to_string())
}

impl Embedder {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` (f32 or f16) from `dir`
    /// onto the device `device` names (`auto`, `cpu`, `cuda` or `cuda:N`). `auto` takes GPU 0
    /// when its driver, cuBLAS, NVRTC and the device are there, else the CPU;
    /// [`Embedder::device_reason`] says which and why.
    pub fn load(dir: &Path, device: &str) -> Result<Self, EmbedError> {
        let choice = DeviceChoice::parse(device)?;
        let config_path = dir.join("config.json");
        let config: Config =
            serde_json::from_slice(&read(&config_path)?).map_err(|source| EmbedError::Config {
                path: config_path,
                source,
            })?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut plain = Tokenizer::from_bytes(read(&tokenizer_path)?).map_err(tok_err)?;
        // The file itself pads every input to 128 and truncates at 128; sentence-transformers
        // overrides both (256, padding to the longest of the batch), and so do we.
        plain.with_truncation(None).map_err(tok_err)?;
        plain.with_padding(None);
        let mut tokenizer = plain.clone();
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(tok_err)?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        let gpu = |n: usize| {
            crate::gpu::probe(n).and_then(|()| crate::gpu::GpuModel::load(dir, &config, n))
        };
        let (backend, device, reason) = match choice {
            DeviceChoice::Cpu => (
                cpu(dir, &config)?,
                "cpu".to_owned(),
                "--device cpu".to_owned(),
            ),
            DeviceChoice::Cuda(n) => {
                let model =
                    gpu(n).map_err(|e| EmbedError::Device(device.to_owned(), e.to_string()))?;
                let name = model.name().to_owned();
                (
                    Backend::Cuda(Box::new(model)),
                    name,
                    format!("--device {device}"),
                )
            }
            DeviceChoice::Auto => match gpu(0) {
                Ok(model) => {
                    let name = model.name().to_owned();
                    (
                        Backend::Cuda(Box::new(model)),
                        name,
                        "--device auto: a CUDA device with its driver, cuBLAS and NVRTC".to_owned(),
                    )
                }
                Err(e) => (
                    cpu(dir, &config)?,
                    "cpu".to_owned(),
                    format!("--device auto: {e}"),
                ),
            },
        };
        Ok(Embedder {
            backend,
            tokenizer,
            plain,
            device,
            reason,
        })
    }

    /// Where the model runs: `cpu` or `cuda:N (name)`.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Why it runs there (for the one start-up log line).
    pub fn device_reason(&self) -> &str {
        &self.reason
    }

    /// Tokens the model would see for `text` (`[CLS]` and `[SEP]` included, at most
    /// [`MAX_TOKENS`]).
    pub fn token_count(&self, text: &str) -> Result<usize, EmbedError> {
        let enc = self.plain.encode(text, true).map_err(tok_err)?;
        Ok(enc.len().min(MAX_TOKENS))
    }

    /// The token ids the model sees for `text` (truncated, not padded).
    pub fn input_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc = self.plain.encode(text, true).map_err(tok_err)?;
        let mut ids = enc.get_ids().to_vec();
        if ids.len() > MAX_TOKENS {
            // Truncation keeps the first tokens and the closing [SEP].
            let sep = ids.last().copied();
            ids.truncate(MAX_TOKENS - 1);
            ids.extend(sep);
        }
        Ok(ids)
    }

    /// `text` cut into chunks of at most [`MAX_TOKENS`] tokens (special tokens included),
    /// consecutive chunks sharing `overlap` tokens; see [`chunk::windows`].
    pub fn chunks(&self, text: &str, overlap: usize) -> Result<Vec<Chunk>, EmbedError> {
        let enc = self.plain.encode(text, false).map_err(tok_err)?;
        Ok(chunk::windows(
            text,
            enc.get_offsets(),
            enc.get_tokens(),
            MAX_TOKENS - 2,
            overlap,
        ))
    }

    /// One unit vector per text, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(tok_err)?;
        let n = encodings.len();
        let len = encodings.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        match &self.backend {
            Backend::Cuda(gpu) => Ok(gpu.embed(&ids, &mask, n, len)?),
            Backend::Cpu(host) => Ok(host.embed(&ids, &mask, n, len)?),
        }
    }
}

/// The host encoder on the CPU, f32 (an f16 file is widened).
fn cpu(dir: &Path, config: &Config) -> Result<Backend, EmbedError> {
    let dims = crate::gpu::dims(config);
    let weights = crate::gpu::load_weights(&dir.join("model.safetensors"), &dims)
        .map_err(crate::CpuError::from)?;
    Ok(Backend::Cpu(Box::new(crate::host::HostModel::new(
        weights, dims,
    )?)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The model `make tools` installs (or `$DOCFLOW_EMBED_MODEL_DIR`).
    pub(crate) fn model_dir() -> std::path::PathBuf {
        std::env::var_os("DOCFLOW_EMBED_MODEL_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/models/minilm")
            })
    }

    pub(crate) fn embedder() -> Embedder {
        // The CPU path, also on a machine with a GPU (the GPU tests compare against it).
        Embedder::load(&model_dir(), "cpu").expect("the MiniLM model (run `make tools`)")
    }

    /// (text, input ids, vector) from sentence-transformers (bench/reference/minilm_reference.py).
    pub(crate) fn reference() -> Vec<(String, Vec<u32>, Vec<f32>)> {
        let data: serde_json::Value =
            serde_json::from_str(include_str!("../tests/data/minilm_reference.json")).unwrap();
        assert_eq!(data["max_seq_length"], MAX_TOKENS);
        data["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let ids = c["input_ids"].as_array().unwrap();
                let vector = c["vector"].as_array().unwrap();
                (
                    c["text"].as_str().unwrap().to_owned(),
                    ids.iter().map(|v| v.as_u64().unwrap() as u32).collect(),
                    vector.iter().map(|v| v.as_f64().unwrap() as f32).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn vectors_equal_sentence_transformers() {
        let model = embedder();
        let cases = reference();
        let texts: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
        // One padded batch, as sentence-transformers computed them, and each text alone:
        // padding must not change a vector.
        let batched = model.embed(&texts).unwrap();
        let mut worst = 1.0f32;
        for ((text, ids, want), got) in cases.iter().zip(&batched) {
            assert_eq!(
                &model.input_ids(text).unwrap(),
                ids,
                "token ids of {text:?}"
            );
            assert_eq!(model.token_count(text).unwrap(), ids.len());
            assert_eq!(got.len(), DIMENSIONS);
            let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
            let c = cosine(got, want);
            worst = worst.min(c);
            assert!(c >= 0.9999, "cosine {c} for {text:?}");
            let alone = model.embed(&[text.as_str()]).unwrap().remove(0);
            let c = cosine(&alone, got);
            assert!(c >= 0.99999, "alone vs batched: {c} for {text:?}");
        }
        eprintln!("worst cosine to sentence-transformers: {worst:.7}");
    }

    #[test]
    fn long_text_is_chunked_within_the_window() {
        let model = embedder();
        let text = reference().pop().unwrap().0; // 60 sentences, past 256 tokens
        let chunks = model.chunks(&text, 32).unwrap();
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for c in &chunks {
            assert_eq!(&text[c.start..c.end], c.text);
            assert!(model.token_count(&c.text).unwrap() <= MAX_TOKENS);
        }
        assert_eq!(chunks[0].start, 0);
        assert_eq!(chunks.last().unwrap().end, text.len());
        assert!(
            chunks.windows(2).all(|w| w[1].start < w[0].end),
            "chunks overlap"
        );
        assert!(model.chunks("", 32).unwrap().is_empty());
    }
}
