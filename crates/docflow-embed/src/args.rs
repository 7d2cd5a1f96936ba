//! The shared configuration block of everything that embeds (the stage, ingest's search).

use std::path::PathBuf;

use clap::Args;

/// Batch token budget on the CPU when none is set: two full windows. On the CPU a batch's
/// time grows with its tokens and chunks/s hardly with its size, so small batches cost no
/// throughput and keep the batch a small document waits behind short
/// (bench/results/fairness.md).
pub const CPU_BATCH_TOKENS: usize = 512;
/// Batch token budget on a GPU when none is set.
pub const GPU_BATCH_TOKENS: usize = 16384;

/// Where the model is and how it runs.
#[derive(Debug, Clone, Args)]
pub struct EmbedArgs {
    /// Directory with all-MiniLM-L6-v2's model.safetensors, tokenizer.json and config.json
    /// (`make tools` links it as .tools/models/minilm).
    #[arg(
        long,
        env = "DOCFLOW_EMBED_MODEL_DIR",
        default_value = ".tools/models/minilm"
    )]
    pub embed_model_dir: PathBuf,

    /// Where the model runs: `auto` (GPU 0 when a CUDA device, its driver, cuBLAS and NVRTC
    /// are there, else the CPU), `cpu`, `cuda` or `cuda:N` (an error if it cannot be used).
    #[arg(long = "device", env = "DOCFLOW_DEVICE", default_value = "auto")]
    pub device: String,

    /// Token budget of one batch: texts are taken while (longest sequence × sequences)
    /// stays within it. Unset: 512 on the CPU (2 full windows: chunks/s is the same from
    /// 1 to 8 windows there, and a small document waits behind a shorter batch,
    /// bench/results/fairness.md) and 16384 on a GPU.
    #[arg(long, env = "DOCFLOW_EMBED_MAX_BATCH_TOKENS")]
    pub max_batch_tokens: Option<usize>,

    /// Tokens shared by consecutive chunks of a page (context across a cut).
    #[arg(long, env = "DOCFLOW_EMBED_CHUNK_OVERLAP", default_value_t = 32)]
    pub chunk_overlap: usize,
}

impl EmbedArgs {
    /// The batch token budget for `embedder`'s device (the set one, else the device's).
    pub fn batch_tokens(&self, embedder: &crate::Embedder) -> usize {
        self.max_batch_tokens
            .unwrap_or(if embedder.device().starts_with("cuda") {
                GPU_BATCH_TOKENS
            } else {
                CPU_BATCH_TOKENS
            })
    }
}
