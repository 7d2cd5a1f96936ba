//! [`StackBuilder`]: what a stack runs, and starting it in dependency order.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use docflow_events::topics::{DOC_PROCESSED, DOC_UPLOADED, partitions};
use docflow_runtime::admin::{TopicSpec, ensure_topics};
use docflow_store::scratch::ScratchDb;

use super::{IngestTweak, Stack, Topics};
use crate::{Broker, EmbeddedError, EmbeddedRegistry, Storage, io, unique_name};

/// Builds a [`Stack`]; see the module docs.
#[must_use]
pub struct StackBuilder {
    storage: Storage,
    partitions: Option<i32>,
    pipeline_names: bool,
    state_dir: Option<PathBuf>,
    broker_port: Option<u16>,
    registry_port: Option<u16>,
    ingest_port: Option<u16>,
    tokens: Vec<(String, String)>,
    ingest: Option<IngestTweak>,
    stages: Vec<String>,
    sqlite: bool,
}

impl std::fmt::Debug for StackBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackBuilder")
            .field("storage", &self.storage)
            .field("partitions", &self.partitions)
            .field("pipeline_names", &self.pipeline_names)
            .field("state_dir", &self.state_dir)
            .field("ingest", &self.ingest.is_some())
            .field("stages", &self.stages)
            .finish_non_exhaustive()
    }
}

impl StackBuilder {
    /// Broker storage (default: memory).
    pub fn storage(mut self, storage: Storage) -> Self {
        self.storage = storage;
        self
    }

    /// Partitions of every pipeline topic (default: the counts in
    /// `docflow_events::topics::TABLE`). Tests use few so a handful of records cover them.
    pub fn partitions(mut self, n: i32) -> Self {
        self.partitions = Some(n);
        self
    }

    /// The pipeline's own topic names (`doc.uploaded`, `doc.processed`) and groups named
    /// after their stages, instead of random ones: for a stack that is the only user of its
    /// broker (`docflow dev`).
    pub fn pipeline_names(mut self) -> Self {
        self.pipeline_names = true;
        self
    }

    /// The result store on SQLite even when `DATABASE_URL` names a PostgreSQL server
    /// (benchmarks, whose reports name the database they measured).
    pub fn sqlite(mut self) -> Self {
        self.sqlite = true;
        self
    }

    /// Keep the database, the registry database, the object store and the broker's files in
    /// `dir` instead of temporary places; the database is the SQLite file `dir/docflow.db`.
    /// The result database and the object store are emptied first (the broker starts
    /// empty, so must they); the registry database is kept (its schema ids stay stable).
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = Some(dir.into());
        self
    }

    /// Fixed ports (default: free ones).
    pub fn ports(
        mut self,
        broker: Option<u16>,
        registry: Option<u16>,
        ingest: Option<u16>,
    ) -> Self {
        self.broker_port = broker;
        self.registry_port = registry;
        self.ingest_port = ingest;
        self
    }

    /// An ingest token for `tenant`.
    pub fn token(mut self, token: &str, tenant: &str) -> Self {
        self.tokens.push((token.to_owned(), tenant.to_owned()));
        self
    }

    /// Serve the ingest API.
    pub fn ingest(self) -> Self {
        self.ingest_with(|_| {})
    }

    /// Serve the ingest API with `tweak` applied to its configuration (limits, timeouts).
    pub fn ingest_with(
        mut self,
        tweak: impl FnOnce(&mut docflow_ingest::Config) + Send + 'static,
    ) -> Self {
        self.ingest = Some(Box::new(tweak));
        self
    }

    /// Run stage `name` of [`crate::STAGES`] in process, with its default configuration
    /// (its isolated workers are the workspace's built binary of it).
    pub fn stage(mut self, name: &str) -> Self {
        self.stages.push(name.to_owned());
        self
    }

    /// Starts everything asked for, in dependency order.
    pub async fn start(self) -> Result<Stack, EmbeddedError> {
        let (state, temp) = match &self.state_dir {
            Some(dir) => (prepare_state_dir(dir)?, None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("docflow-stack-")
                    .tempdir()
                    .map_err(io("creating the stack directory"))?;
                (dir.path().to_path_buf(), Some(dir))
            }
        };
        let broker = match (self.broker_port, &self.state_dir) {
            (Some(port), _) => {
                Broker::start_in(&state.join("broker"), port, self.storage.clone()).await?
            }
            (None, Some(_)) => {
                Broker::start_in(
                    &state.join("broker"),
                    crate::free_port()?,
                    self.storage.clone(),
                )
                .await?
            }
            (None, None) => Broker::start_with(self.storage.clone()).await?,
        };
        let mut scratch = Vec::new();
        let (registry_url, database_url) = if self.state_dir.is_some() {
            (
                format!("sqlite://{}", state.join("registry.db").display()),
                format!("sqlite://{}", state.join("docflow.db").display()),
            )
        } else {
            let registry_db = ScratchDb::sqlite()?;
            let db = if self.sqlite {
                ScratchDb::sqlite()?
            } else {
                ScratchDb::from_env().await?
            };
            let urls = (registry_db.url.clone(), db.url.clone());
            scratch.push(registry_db);
            scratch.push(db);
            urls
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], self.registry_port.unwrap_or(0)));
        let registry = EmbeddedRegistry::start_on(&registry_url, addr).await?;

        // One random suffix names this stack's topics and groups, so a test sees only its own.
        let suffix = (!self.pipeline_names).then(|| unique_name("s")["s-".len()..].to_owned());
        let named = |base: &str| match &suffix {
            Some(s) => format!("{base}-{s}"),
            None => base.to_owned(),
        };
        let topics = Topics {
            uploaded: named(DOC_UPLOADED),
            processed: named(DOC_PROCESSED),
        };
        let count = |role: &str| self.partitions.or(partitions(role)).unwrap_or(1);
        ensure_topics(
            &broker.kafka_args(),
            &[
                TopicSpec::new(&topics.uploaded, count(DOC_UPLOADED)),
                TopicSpec::new(&topics.processed, count(DOC_PROCESSED)),
            ],
            Duration::from_secs(30),
        )
        .await?;

        let mut stack = Stack {
            objects: state.join("objects"),
            broker,
            registry,
            database_url,
            topics,
            suffix,
            tokens: self.tokens,
            ingest_url: None,
            services: Vec::new(),
            scratch,
            _temp: temp,
        };
        // Ingest reports (and `?wait=` waits for) the stages this stack runs.
        let running = self
            .stages
            .iter()
            .map(|name| {
                crate::stages::stage(name).ok_or_else(|| EmbeddedError::UnknownStage(name.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = running.iter().map(|s| s.name.to_owned()).collect();
        if let Some(tweak) = self.ingest {
            let tweak: IngestTweak = if names.is_empty() {
                tweak
            } else {
                Box::new(move |config: &mut docflow_ingest::Config| {
                    config.stages = names;
                    tweak(config);
                })
            };
            stack.start_ingest(self.ingest_port, tweak).await?;
        }
        for stage in running {
            stage.start(&mut stack).await?;
        }
        Ok(stack)
    }
}

fn prepare_state_dir(dir: &Path) -> Result<PathBuf, EmbeddedError> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(io(format!("resolving {}", dir.display())))?;
    for stale in [
        "docflow.db",
        "docflow.db-wal",
        "docflow.db-shm",
        "ingest.db",
    ] {
        let _ = std::fs::remove_file(dir.join(stale));
    }
    let _ = std::fs::remove_dir_all(dir.join("objects"));
    Ok(dir)
}

impl Stack {
    /// A builder for a test stack: memory broker, table partition counts, random names.
    pub fn builder() -> StackBuilder {
        StackBuilder {
            storage: Storage::Memory,
            partitions: None,
            pipeline_names: false,
            state_dir: None,
            broker_port: None,
            registry_port: None,
            ingest_port: None,
            tokens: Vec::new(),
            ingest: None,
            stages: Vec::new(),
            sqlite: false,
        }
    }
}
