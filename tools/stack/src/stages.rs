//! The pipeline's stages: [`STAGES`] is the one list of them that the harness
//! ([`Stack::start_named`], `Stack::builder().stage(name)`), `docflow dev` and
//! `docflow calibrate` read. A new stage is one
//! line here (and its crate in this crate's dependencies); `infra/plan.yaml` lists its
//! deployment.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use docflow_events::{DocUploaded, stage_keys};
use docflow_stage::isolate::InProcess;
use docflow_stage::{Document, LocalTools, StageArgs, StageService};

use crate::{EmbeddedError, Stack, pdfium_library, workspace_binary, workspace_root};

/// Every stage on the stage layer, in the order `docflow dev` starts them.
pub const STAGES: &[PipelineStage] = &[
    PipelineStage::of::<docflow_thumbnails::Thumbnails>(),
    PipelineStage::of::<docflow_ocr_embeddings::OcrEmbeddings>(),
];

/// The stage named `name` in [`STAGES`].
pub fn stage(name: &str) -> Option<&'static PipelineStage> {
    STAGES.iter().find(|s| s.name == name)
}

/// The names of [`STAGES`].
pub fn stage_names() -> Vec<String> {
    STAGES.iter().map(|s| s.name.to_owned()).collect()
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, EmbeddedError>> + Send + 'a>>;
/// Sample documents: (file name, bytes).
type Samples = Vec<(String, Bytes)>;

/// One stage of [`STAGES`]: its names and how to start or measure it, whatever its type.
pub struct PipelineStage {
    /// The stage's name (its results' `stage`, its default consumer group).
    pub name: &'static str,
    /// Its binary.
    pub binary: &'static str,
    start: for<'a> fn(&'a mut Stack) -> Boxed<'a, ()>,
    measure: fn(StageArgs, Samples, usize) -> Boxed<'static, Vec<Duration>>,
}

impl std::fmt::Debug for PipelineStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineStage")
            .field("name", &self.name)
            .field("binary", &self.binary)
            .finish_non_exhaustive()
    }
}

impl PipelineStage {
    /// The entry of stage `S`.
    pub const fn of<S: StageService>() -> Self {
        PipelineStage {
            name: S::NAME,
            binary: S::BINARY,
            start: |stack| Box::pin(stack.start_stage::<S>(|_| {})),
            measure: |args, docs, runs| Box::pin(measure::<S>(args, docs, runs)),
        }
    }

    /// Starts it in `stack` with its default configuration.
    pub async fn start(&self, stack: &mut Stack) -> Result<(), EmbeddedError> {
        (self.start)(stack).await
    }

    /// Its service time: the stage built from `args` (Kafka and the stores unused), then each
    /// of `docs` processed once to warm up and `runs` times measured.
    pub async fn measure(
        &self,
        args: StageArgs,
        docs: Vec<(String, Bytes)>,
        runs: usize,
    ) -> Result<Vec<Duration>, EmbeddedError> {
        (self.measure)(args, docs, runs).await
    }
}

/// Where the local stack finds stage `S`'s tools and worker binary: the workspace's `.tools`
/// and its built binaries.
pub fn local_tools<S: StageService>() -> Result<LocalTools, EmbeddedError> {
    let isolated = std::any::TypeId::of::<S::Worker>() != std::any::TypeId::of::<InProcess>();
    let worker_exe: Option<PathBuf> = if isolated {
        Some(workspace_binary(S::BINARY)?)
    } else {
        None
    };
    Ok(LocalTools {
        tools_dir: workspace_root().join(".tools"),
        pdfium_lib: pdfium_library(),
        worker_exe,
    })
}

/// Stage `S` built from `config`, its metrics registered in `registry`.
pub async fn build<S: StageService>(
    config: &S::Config,
    registry: &prometheus::Registry,
) -> Result<S, EmbeddedError> {
    S::build(config, registry)
        .await
        .map_err(|source| EmbeddedError::Service {
            name: S::NAME,
            source,
        })
}

async fn measure<S: StageService>(
    args: StageArgs,
    docs: Vec<(String, Bytes)>,
    runs: usize,
) -> Result<Vec<Duration>, EmbeddedError> {
    let config = S::local(args, &local_tools::<S>()?)?;
    let stage: S = build::<S>(&config, &prometheus::Registry::new()).await?;
    let mut times = Vec::new();
    for (name, bytes) in docs {
        let (document_id, idempotency_key) = stage_keys(&bytes, S::NAME, S::VERSION);
        let doc = Document {
            event: DocUploaded {
                document_id,
                tenant_id: "calibrate".into(),
                object_uri: format!("calibrate/{name}"),
                content_type: String::new(),
                size_bytes: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
                original_file_name: Some(name.clone()),
                uploaded_at: 0,
                producer_version: "docflow-calibrate".into(),
            },
            bytes,
            idempotency_key,
            attempt: 1,
            progress: None,
        };
        for run in 0..=runs {
            let started = Instant::now();
            stage
                .process(&doc)
                .await
                .map_err(|e| EmbeddedError::Service {
                    name: S::NAME,
                    source: format!("{name}: {e}").into(),
                })?;
            if run > 0 {
                times.push(started.elapsed());
            }
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_is_listed_once_under_its_own_name() {
        let names = stage_names();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for s in STAGES {
            assert_eq!(stage(s.name).map(|f| f.binary), Some(s.binary));
            assert!(s.binary.starts_with("docflow-"), "{s:?}");
        }
        assert!(stage("no-such-stage").is_none());
    }
}
