//! The shared configuration block of everything that embeds (the stage, ingest's search).

use std::path::PathBuf;

use clap::Args;

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

    /// Token budget of one batch: requests are taken in arrival order while
    /// (longest sequence × sequences) stays within it.
    #[arg(long, env = "DOCFLOW_EMBED_MAX_BATCH_TOKENS", default_value_t = 8192)]
    pub max_batch_tokens: usize,

    /// Tokens shared by consecutive chunks of a page (context across a cut).
    #[arg(long, env = "DOCFLOW_EMBED_CHUNK_OVERLAP", default_value_t = 32)]
    pub chunk_overlap: usize,
}
