//! THE stack harness: broker, registry, database, topics, object store, ingest and stages on
//! free loopback ports, built once here for every integration test, `docflow dev` and the
//! benchmarks.
//!
//! ```no_run
//! # async fn demo() -> Result<(), docflow_embedded::EmbeddedError> {
//! use docflow_embedded::Stack;
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

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use docflow_config::KafkaArgs;
use docflow_events::topics::{DOC_PROCESSED, DOC_UPLOADED, partitions};
use docflow_runtime::admin::{TopicSpec, ensure_topics};
use docflow_stage::{StageArgs, StageService};
use docflow_store::scratch::ScratchDb;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{Broker, EmbeddedError, EmbeddedRegistry, Storage, io, unique_name, workspace_root};

/// A record as read back: (key, value).
pub type KeyValue = (Vec<u8>, Vec<u8>);

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

    /// Runs `service` in process until the stack stops (its future gets the shutdown signal).
    fn spawn<F, Fut, E>(&mut self, name: &'static str, service: F)
    where
        F: FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Cause>,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        let fut = service(shutdown);
        let task = tokio::spawn(async move { fut.await.map_err(Into::into) });
        self.services.push(Service {
            name,
            stop: Some(stop),
            task,
        });
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

    async fn start_ingest(
        &mut self,
        port: Option<u16>,
        tweak: IngestTweak,
    ) -> Result<(), EmbeddedError> {
        let tokens: Vec<(&str, &str)> = self
            .tokens
            .iter()
            .map(|(t, n)| (t.as_str(), n.as_str()))
            .collect();
        let mut config = docflow_ingest::Config::local(
            &self.broker.bootstrap_servers(),
            &self.registry.url(),
            &self.database_url,
            &self.objects,
            &tokens,
        )?;
        config.topic = self.topics.uploaded.clone();
        config.processed_topic = self.topics.processed.clone();
        // The search model `make tools` installed in this checkout (not the process's
        // working directory, which for a test is its crate's).
        config.embed_model_dir = workspace_root().join(".tools/models/minilm");
        tweak(&mut config);
        // The console watches the stages' groups under this stack's names.
        if config.console_groups.is_empty() {
            config.console_groups = config
                .stages
                .iter()
                .map(|stage| format!("{}={stage}", self.group(stage)))
                .collect();
        }
        let app =
            docflow_ingest::build_state(&config)
                .await
                .map_err(|e| EmbeddedError::Service {
                    name: "ingest",
                    source: e.into(),
                })?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.unwrap_or(0)))
            .await
            .map_err(io("binding the ingest API"))?;
        let addr = listener.local_addr().map_err(io("ingest address"))?;
        self.ingest_url = Some(format!("http://{addr}"));
        self.spawn("ingest", move |shutdown| {
            docflow_ingest::serve(app, listener, shutdown)
        });
        Ok(())
    }

    /// Starts stage `name` of [`crate::STAGES`] in process with its default configuration.
    pub async fn start_named(&mut self, name: &str) -> Result<(), EmbeddedError> {
        crate::stages::stage(name)
            .ok_or_else(|| EmbeddedError::UnknownStage(name.to_owned()))?
            .start(self)
            .await
    }

    /// Starts stage `S` in process (its tools from the workspace's `.tools`, its workers the
    /// workspace's built binary of it) with `tweak` applied to its configuration (workers,
    /// limits, sizes).
    pub async fn start_stage<S: StageService>(
        &mut self,
        tweak: impl FnOnce(&mut S::Config),
    ) -> Result<(), EmbeddedError> {
        let mut config = S::local(
            self.stage_args(S::NAME)?,
            &crate::stages::local_tools::<S>()?,
        )?;
        tweak(&mut config);
        // Started and probed here, so a failure is this call's error, not the task's.
        let registry = prometheus::Registry::new();
        let stage = crate::stages::build::<S>(&config, &registry).await?;
        self.spawn(S::NAME, move |shutdown| async move {
            docflow_stage::run_until(stage, S::stage_args(&config), registry, shutdown).await
        });
        Ok(())
    }

    /// Starts the analytics rollup in process (group `analytics-rollup` of this stack, both
    /// pipeline topics, this stack's database; every other setting at its default).
    pub async fn start_analytics(&mut self) -> Result<(), EmbeddedError> {
        let config = docflow_analytics_rollup::Config::from_args([
            "docflow-analytics-rollup".to_owned(),
            "--kafka-bootstrap-servers".to_owned(),
            self.broker.bootstrap_servers(),
            "--schema-registry-url".to_owned(),
            self.registry.url(),
            "--database-url".to_owned(),
            self.database_url.clone(),
            "--topic".to_owned(),
            self.topics.uploaded.clone(),
            "--processed-topic".to_owned(),
            self.topics.processed.clone(),
            "--group".to_owned(),
            self.group(docflow_analytics_rollup::GROUP),
            "--metrics-listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ])?;
        self.spawn(docflow_analytics_rollup::GROUP, move |shutdown| {
            docflow_analytics_rollup::run_until(config, shutdown)
        });
        Ok(())
    }

    /// Creates one more topic, `<prefix>-<random>` with `partitions` partitions, on the
    /// stack's broker (runtime tests and benchmarks that need raw topics of their own).
    pub async fn topic(&self, prefix: &str, partitions: i32) -> Result<String, EmbeddedError> {
        let name = unique_name(prefix);
        ensure_topics(
            &self.kafka(),
            &[TopicSpec::new(&name, partitions)],
            Duration::from_secs(30),
        )
        .await?;
        Ok(name)
    }

    /// Every record of `topic` (all partitions) from the beginning: (key, value) pairs.
    pub async fn records(&self, topic: &str) -> Result<Vec<KeyValue>, EmbeddedError> {
        let read = self.records_with_header(topic, "").await?;
        Ok(read.into_iter().map(|(kv, _)| kv).collect())
    }

    /// Every record of `topic` from the beginning, with the value of its header `header`
    /// as text (e.g. a dead letter's `docflow.dlq.error.class`).
    pub async fn records_with_header(
        &self,
        topic: &str,
        header: &str,
    ) -> Result<Vec<(KeyValue, Option<String>)>, EmbeddedError> {
        let (kafka, topic, header) = (self.kafka(), topic.to_owned(), header.to_owned());
        tokio::task::spawn_blocking(move || read_all(&kafka, &topic, &header))
            .await
            .map_err(EmbeddedError::Task)?
    }

    /// Polls [`Stack::records`] until `topic` holds at least `n` records or `timeout` passed;
    /// returns what it read last.
    pub async fn wait_records(
        &self,
        topic: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<KeyValue>, EmbeddedError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self.records(topic).await?;
            if got.len() >= n || tokio::time::Instant::now() > deadline {
                return Ok(got);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The sum of `group`'s committed offsets on `topic` (partitions without one count 0).
    pub async fn committed(&self, group: &str, topic: &str) -> Result<i64, EmbeddedError> {
        let (kafka, topic, group) = (self.kafka(), topic.to_owned(), group.to_owned());
        tokio::task::spawn_blocking(move || committed_sum(&kafka, &group, &topic))
            .await
            .map_err(EmbeddedError::Task)?
    }

    /// Per partition of `topic`: its id, `group`'s committed offset (if any) and the log
    /// end — what KEDA's Kafka scaler reads.
    pub async fn offsets(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<Vec<(i32, Option<i64>, i64)>, EmbeddedError> {
        let (kafka, topic, group) = (self.kafka(), topic.to_owned(), group.to_owned());
        tokio::task::spawn_blocking(move || partition_offsets(&kafka, &group, &topic))
            .await
            .map_err(EmbeddedError::Task)?
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

fn read_all(
    kafka: &KafkaArgs,
    topic: &str,
    header: &str,
) -> Result<Vec<(KeyValue, Option<String>)>, EmbeddedError> {
    let kafka_err = |context: &'static str| move |source| EmbeddedError::Kafka { context, source };
    let c: BaseConsumer = kafka
        .client_config("docflow-stack-reader")
        .set("group.id", unique_name("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .map_err(kafka_err("creating a reader"))?;
    let meta = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(kafka_err("metadata"))?;
    let parts = meta.topics().first().map_or(0, |t| t.partitions().len());
    let mut end = 0;
    let mut tpl = TopicPartitionList::new();
    for p in 0..i32::try_from(parts).unwrap_or(0) {
        let (lo, hi) = c
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .map_err(kafka_err("watermarks"))?;
        end += hi - lo;
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(kafka_err("assignment"))?;
    }
    c.assign(&tpl).map_err(kafka_err("assign"))?;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while out.len() < usize::try_from(end).unwrap_or(0) {
        if std::time::Instant::now() > deadline {
            return Err(EmbeddedError::Timeout(format!(
                "read {} of {end} records of {topic} in 60 s",
                out.len()
            )));
        }
        if let Some(m) = c.poll(Duration::from_secs(1)) {
            let m = m.map_err(kafka_err("reading"))?;
            let value = m.headers().and_then(|hs| {
                hs.iter()
                    .find(|h| h.key == header)
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            });
            out.push((
                (
                    m.key().unwrap_or_default().to_vec(),
                    m.payload().unwrap_or_default().to_vec(),
                ),
                value,
            ));
        }
    }
    Ok(out)
}

fn committed_sum(kafka: &KafkaArgs, group: &str, topic: &str) -> Result<i64, EmbeddedError> {
    let (_, committed) = committed_offsets(kafka, group, topic)?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| e.offset().to_raw().filter(|o| *o >= 0))
        .sum())
}

/// Per partition: id, `group`'s committed offset (if any) and the log end.
fn partition_offsets(
    kafka: &KafkaArgs,
    group: &str,
    topic: &str,
) -> Result<Vec<(i32, Option<i64>, i64)>, EmbeddedError> {
    let (c, committed) = committed_offsets(kafka, group, topic)?;
    let mut out = Vec::new();
    for e in committed.elements() {
        let (_, high) = c
            .fetch_watermarks(topic, e.partition(), Duration::from_secs(10))
            .map_err(|source| EmbeddedError::Kafka {
                context: "watermarks",
                source,
            })?;
        out.push((e.partition(), e.offset().to_raw().filter(|o| *o >= 0), high));
    }
    Ok(out)
}

/// `group`'s committed offsets on every partition of `topic`, and the client that read them.
fn committed_offsets(
    kafka: &KafkaArgs,
    group: &str,
    topic: &str,
) -> Result<(BaseConsumer, TopicPartitionList), EmbeddedError> {
    let kafka_err = |context: &'static str| move |source| EmbeddedError::Kafka { context, source };
    let c: BaseConsumer = kafka
        .client_config("docflow-stack-offsets")
        .set("group.id", group)
        .create()
        .map_err(kafka_err("creating an offsets client"))?;
    let meta = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(kafka_err("metadata"))?;
    let parts = meta.topics().first().map_or(0, |t| t.partitions().len());
    let mut tpl = TopicPartitionList::new();
    for p in 0..i32::try_from(parts).unwrap_or(0) {
        tpl.add_partition(topic, p);
    }
    let committed = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .map_err(kafka_err("committed offsets"))?;
    Ok((c, committed))
}
