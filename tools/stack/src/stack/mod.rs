//! THE stack harness: broker, registry, database, topics, object store, ingest and stages on
//! free loopback ports, built once here for every integration test, `docflow dev` and the
//! benchmarks.
//!
//! ```no_run
//! # async fn demo() -> Result<(), docflow_stack::EmbeddedError> {
//! use docflow_stack::Stack;
//! let stack = Stack::builder().token("tok", "alice").ingest().stage("thumbnails").start().await?;
//! // POST to stack.ingest_url(), read stack.topics.processed, ...
//! stack.stop().await?;
//! # Ok(()) }
//! ```
//!
//! Tests get random topic and group names, a scratch database (PostgreSQL when
//! `DATABASE_URL` names one, else SQLite) and a temporary object store; `docflow dev` asks for
//! the pipeline's own names and a state directory instead. Every handle stops what it started:
//! [`Stack::stop`] drains ingest and the stages and drops the scratch databases; dropping a
//! stack without it still stops the services, kills the broker and removes its files.

use std::path::PathBuf;

use docflow_config::KafkaArgs;
use docflow_stage::StageArgs;
use docflow_store::scratch::ScratchDb;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Broker, EmbeddedError, EmbeddedRegistry};

mod builder;
mod records;
mod services;

pub use builder::StackBuilder;
pub use records::KeyValue;

/// A boxed error of a service the harness started.
type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Names of the pipeline topics in one stack.
#[derive(Debug, Clone)]
pub struct Topics {
    /// The stack's `doc.uploaded`.
    pub uploaded: String,
    /// The stack's `doc.processed`.
    pub processed: String,
}

/// How ingest is configured beyond the stack's endpoints.
type IngestTweak = Box<dyn FnOnce(&mut docflow_ingest::Config) + Send>;

/// A service the stack runs in process.
struct Service {
    name: &'static str,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), Cause>>,
}

/// A running stack; see the module docs.
pub struct Stack {
    /// The broker.
    pub broker: Broker,
    /// The schema registry.
    pub registry: EmbeddedRegistry,
    /// The result store every service of the stack shares.
    pub database_url: String,
    /// The object store directory every service of the stack shares.
    pub objects: PathBuf,
    /// The pipeline topics' names in this stack.
    pub topics: Topics,
    suffix: Option<String>,
    tokens: Vec<(String, String)>,
    ingest_url: Option<String>,
    services: Vec<Service>,
    scratch: Vec<ScratchDb>,
    _temp: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("broker", &self.broker.bootstrap_servers())
            .field("registry", &self.registry.url())
            .field("topics", &self.topics)
            .field("ingest", &self.ingest_url)
            .field(
                "services",
                &self.services.iter().map(|s| s.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Stack {
    /// Client arguments for the stack's broker.
    pub fn kafka(&self) -> KafkaArgs {
        self.broker.kafka_args()
    }

    /// The ingest API's base URL, `http://127.0.0.1:PORT` (empty without ingest).
    pub fn ingest_url(&self) -> &str {
        self.ingest_url.as_deref().unwrap_or_default()
    }

    /// The consumer group stage `stage` runs as in this stack.
    pub fn group(&self, stage: &str) -> String {
        // Random per stack but stable within it, so a restarted stage rejoins its group.
        match &self.suffix {
            Some(s) => format!("{stage}-{s}"),
            None => stage.to_owned(),
        }
    }

    /// The shared stage configuration pointing at this stack, for stage `stage`.
    pub fn stage_args(&self, stage: &str) -> Result<StageArgs, EmbeddedError> {
        let mut args = StageArgs::local(
            &self.broker.bootstrap_servers(),
            &self.registry.url(),
            &self.database_url,
            &self.objects,
        )?;
        args.group = Some(self.group(stage));
        args.topic = self.topics.uploaded.clone();
        args.processed_topic = self.topics.processed.clone();
        Ok(args)
    }

    /// The same configuration as command-line flags, for starting a stage's real binary.
    pub fn stage_flags(&self, stage: &str) -> Vec<String> {
        [
            ("--kafka-bootstrap-servers", self.broker.bootstrap_servers()),
            ("--schema-registry-url", self.registry.url()),
            ("--database-url", self.database_url.clone()),
            ("--object-dir", self.objects.display().to_string()),
            ("--group", self.group(stage)),
            ("--topic", self.topics.uploaded.clone()),
            ("--processed-topic", self.topics.processed.clone()),
            ("--metrics-listen", "127.0.0.1:0".to_owned()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v])
        .collect()
    }

    /// Sends service `name` (`ingest`, a stage name) its shutdown signal without waiting for
    /// it to drain: tests of what a service does while it stops. `false` if there is no such
    /// running service.
    pub fn signal_shutdown(&mut self, name: &str) -> bool {
        self.services
            .iter_mut()
            .find(|s| s.name == name && s.stop.is_some())
            .and_then(|s| s.stop.take())
            .is_some_and(|stop| stop.send(()).is_ok())
    }

    /// Stops the services (ingest first, then the stages, each draining), the registry and
    /// the broker, and drops the scratch databases (PostgreSQL schemas are dropped only
    /// here; dropping a stack without `stop` removes its files but leaves those). The first
    /// failure is reported after everything was stopped.
    pub async fn stop(mut self) -> Result<(), EmbeddedError> {
        let mut failed = None;
        for mut s in std::mem::take(&mut self.services) {
            if let Some(stop) = s.stop.take() {
                let _ = stop.send(());
            }
            let result = match (&mut s.task).await {
                Ok(r) => r,
                Err(e) => Err(e.into()),
            };
            if let Err(source) = result {
                failed.get_or_insert(EmbeddedError::Service {
                    name: s.name,
                    source,
                });
            }
        }
        self.registry.shut_down().await;
        let _ = self.broker.kill().await;
        for db in std::mem::take(&mut self.scratch) {
            if let Err(e) = db.drop_now().await {
                failed.get_or_insert(e.into());
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

impl Drop for Stack {
    /// Without [`Stack::stop`] (a failing test): nothing may outlive the stack, so the
    /// services are aborted rather than drained; the broker and the files go with their own
    /// handles.
    fn drop(&mut self) {
        for s in &mut self.services {
            if let Some(stop) = s.stop.take() {
                let _ = stop.send(());
            }
            s.task.abort();
        }
    }
}
