//! The embedded stack docflow runs on a developer machine and in CI.
//!
//! * [`Broker`]: a real Kafka-API broker (Nisshi) as a child process on a free loopback port,
//!   with memory or SQLite storage; ready once it answers Metadata; killed on drop.
//! * [`EmbeddedRegistry`]: the docflow schema registry served in-process on port 0.
//! * [`unique_name`]: random topic and group names, so tests never share state.
//! * [`Stack`]: all of it together — broker, registry, database, topics, object store, ingest
//!   and stages — the one harness every integration test, `docflow dev` and the benchmarks
//!   start from.
//!
//! No test assumes a broker on 9092: every broker here gets its own port.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use docflow_config::{DatabaseArgs, KafkaArgs};
use docflow_events::CompatibilityLevel;
use docflow_registry::{RegistryError, Store};
use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod layouts;
pub mod measure;
pub mod pdf;
pub mod process;
mod stack;
pub mod stages;

pub use stack::{KeyValue, Stack, StackBuilder, Topics};
pub use stages::{PipelineStage, STAGES};

/// Environment variable naming the broker binary (overrides the search below).
pub const BROKER_BIN_ENV: &str = "DOCFLOW_BROKER_BIN";

/// Errors starting the embedded stack.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// No broker binary was found.
    #[error(
        "no Nisshi broker binary: set {BROKER_BIN_ENV}, or run `make tools` to install it into .tools/bin (looked in: {0})"
    )]
    NoBrokerBinary(String),
    /// Spawning or talking to a process failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The broker exited or did not answer Metadata in time.
    #[error("broker did not become ready: {reason}\n--- broker log (tail) ---\n{log}")]
    BrokerNotReady {
        /// What went wrong.
        reason: String,
        /// Last lines of the broker's output.
        log: String,
    },
    /// The registry failed to start.
    #[error("schema registry: {0}")]
    Registry(#[from] RegistryError),
    /// A scratch database could not be made or dropped.
    #[error("database: {0}")]
    Store(#[from] docflow_store::StoreError),
    /// Declaring the stack's topics failed.
    #[error("topics: {0}")]
    Runtime(#[from] docflow_runtime::RuntimeError),
    /// A service's configuration was refused.
    #[error("configuration: {0}")]
    Config(#[from] clap::Error),
    /// A service of the stack failed to start or stopped with an error.
    #[error("{name}: {source}")]
    Service {
        /// The service.
        name: &'static str,
        /// Its error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A Kafka request of the harness failed.
    #[error("kafka: {context}: {source}")]
    Kafka {
        /// What was being done.
        context: &'static str,
        /// librdkafka's error.
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A stage that is not in [`STAGES`].
    #[error("no stage {0:?} in docflow_stack::STAGES")]
    UnknownStage(String),
    /// Something the harness waited for did not happen in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A blocking task of the harness panicked.
    #[error("harness task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EmbeddedError {
    let context = context.into();
    move |source| EmbeddedError::Io { context, source }
}

/// A random name with `prefix`, e.g. `test-orders-1f3a9c2e`.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> Result<u16, EmbeddedError> {
    let l = StdListener::bind("127.0.0.1:0").map_err(io("binding a free port"))?;
    Ok(l.local_addr().map_err(io("reading a free port"))?.port())
}

/// The workspace root (where `.tools/` lives), found from this crate's location.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A binary of this workspace built next to the running program (tests run from
/// `target/<profile>/deps`, tools from `target/<profile>`), e.g. `docflow-thumbnails`, whose
/// stage starts its render workers from it.
pub fn workspace_binary(name: &str) -> Result<PathBuf, EmbeddedError> {
    let exe = std::env::current_exe().map_err(io("locating this program"))?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join(name);
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(EmbeddedError::Io {
            context: format!("{} (build it: cargo build -p {name})", bin.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
    }
}

/// `libpdfium.so` for the thumbnails stage: `$DOCFLOW_PDFIUM_LIB`, else the one `make tools`
/// links at `.tools/lib/libpdfium.so` in the workspace.
pub fn pdfium_library() -> PathBuf {
    std::env::var_os("DOCFLOW_PDFIUM_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/lib/libpdfium.so"))
}

/// Finds the broker binary: `$DOCFLOW_BROKER_BIN`, then `.tools/bin/nisshi` (and `tansu`, the
/// same broker before its rename) in the workspace, then the same names on `PATH`.
pub fn broker_binary() -> Result<PathBuf, EmbeddedError> {
    let mut tried = Vec::new();
    if let Ok(p) = std::env::var(BROKER_BIN_ENV) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p.display().to_string());
    }
    let tools = workspace_root().join(".tools/bin");
    for name in ["nisshi", "tansu"] {
        let p = tools.join(name);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(p.display().to_string());
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            for name in ["nisshi", "tansu"] {
                let p = dir.join(name);
                if p.is_file() {
                    return Ok(p);
                }
            }
        }
        tried.push("PATH".to_owned());
    }
    Err(EmbeddedError::NoBrokerBinary(tried.join(", ")))
}

/// Where the broker keeps its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// In memory: fast, gone with the process.
    Memory,
    /// A SQLite file in the broker's directory: survives a broker restart (durability tests).
    Sqlite,
}

/// A Nisshi broker child process on a free loopback port.
#[derive(Debug)]
pub struct Broker {
    bin: PathBuf,
    child: Option<Child>,
    port: u16,
    storage: Storage,
    dir: PathBuf,
    owns_dir: bool,
}

impl Broker {
    /// Starts a broker with memory storage in a new temporary directory.
    pub async fn start() -> Result<Self, EmbeddedError> {
        Self::start_with(Storage::Memory).await
    }

    /// Starts a broker with `storage` in a new temporary directory.
    pub async fn start_with(storage: Storage) -> Result<Self, EmbeddedError> {
        Self::start_binary(&broker_binary()?, storage).await
    }

    /// Starts the broker binary `bin` with `storage` in a new temporary directory.
    pub async fn start_binary(bin: &Path, storage: Storage) -> Result<Self, EmbeddedError> {
        let dir = tempfile::Builder::new()
            .prefix("docflow-broker-")
            .tempdir()
            .map_err(io("creating broker directory"))?
            .keep();
        let mut broker = Broker {
            bin: bin.to_path_buf(),
            child: None,
            port: free_port()?,
            storage,
            dir,
            owns_dir: true,
        };
        broker.spawn().await?;
        Ok(broker)
    }

    /// Starts a broker on `port` keeping its files in `dir` (kept after drop): `make run`.
    pub async fn start_in(dir: &Path, port: u16, storage: Storage) -> Result<Self, EmbeddedError> {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let mut broker = Broker {
            bin: broker_binary()?,
            child: None,
            port,
            storage,
            dir: dir.to_path_buf(),
            owns_dir: false,
        };
        broker.spawn().await?;
        Ok(broker)
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Plaintext client arguments for this broker.
    pub fn kafka_args(&self) -> KafkaArgs {
        KafkaArgs::plaintext(self.bootstrap_servers())
    }

    /// The broker's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    /// Kills the broker with SIGKILL and waits for it to exit.
    pub async fn kill(&mut self) -> Result<(), EmbeddedError> {
        if let Some(mut child) = self.child.take() {
            child.kill().await.map_err(io("killing broker"))?;
        }
        Ok(())
    }

    /// Starts the broker again on the same port and storage (after [`Broker::kill`]).
    pub async fn restart(&mut self) -> Result<(), EmbeddedError> {
        self.kill().await?;
        self.spawn().await
    }

    async fn spawn(&mut self) -> Result<(), EmbeddedError> {
        let bin = self.bin.clone();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let storage = match self.storage {
            Storage::Memory => "memory://nisshi/".to_owned(),
            Storage::Sqlite => "sqlite://nisshi.db".to_owned(),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io("opening broker log"))?;
        let log_err = log.try_clone().map_err(io("opening broker log"))?;
        let mut cmd = Command::new(&bin);
        cmd.arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg(&storage)
            .arg("--group-initial-rebalance-delay")
            .arg("100ms")
            .current_dir(&self.dir)
            .env_remove("SCHEMA_REGISTRY")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env(
                "RUST_LOG",
                std::env::var("DOCFLOW_BROKER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(io(format!("spawning {}", bin.display())))?;
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(60)).await
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), EmbeddedError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(self.not_ready(format!("broker exited with {status}")));
            }
            let bootstrap = self.bootstrap_servers();
            let ok = tokio::task::spawn_blocking(move || metadata_ok(&bootstrap))
                .await
                .unwrap_or(false);
            if ok {
                tracing::info!(bootstrap = %self.bootstrap_servers(), "broker ready");
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(self.not_ready(format!("no Metadata answer within {timeout:?}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn not_ready(&self, reason: String) -> EmbeddedError {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        EmbeddedError::BrokerNotReady {
            reason,
            log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        }
    }
}

fn metadata_ok(bootstrap: &str) -> bool {
    let consumer: Result<BaseConsumer, _> = KafkaArgs::plaintext(bootstrap)
        .client_config("docflow-stack-probe")
        .set("log_level", "0")
        .create();
    match consumer {
        Ok(c) => c
            .fetch_metadata(None, Duration::from_millis(1500))
            .map(|md| !md.brokers().is_empty())
            .unwrap_or(false),
        Err(_) => false,
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The docflow schema registry served in-process on a free port.
#[derive(Debug)]
pub struct EmbeddedRegistry {
    addr: SocketAddr,
    store: Arc<Store>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl EmbeddedRegistry {
    /// Serves a registry over the database at `database_url` on `127.0.0.1:0`.
    pub async fn start(database_url: &str) -> Result<Self, EmbeddedError> {
        Self::start_on(
            database_url,
            "127.0.0.1:0".parse().map_err(|_| EmbeddedError::Io {
                context: "address".into(),
                source: std::io::Error::other("bad address"),
            })?,
        )
        .await
    }

    /// Serves a registry over the database at `database_url` on `addr`.
    pub async fn start_on(database_url: &str, addr: SocketAddr) -> Result<Self, EmbeddedError> {
        let db = DatabaseArgs {
            url: database_url.to_owned(),
            max_connections: 4,
        };
        let store = docflow_registry::open_store(&db, CompatibilityLevel::Backward).await?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(io(format!("binding registry on {addr}")))?;
        let addr = listener.local_addr().map_err(io("registry address"))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(docflow_registry::serve(
            store.clone(),
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(EmbeddedRegistry {
            addr,
            store,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The store behind it (tests close its pool to simulate a database outage).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Stops serving and waits for in-flight requests.
    pub async fn stop(mut self) {
        self.shut_down().await;
    }

    /// Stops serving and waits for in-flight requests, leaving the handle in place (for
    /// owners that cannot move it out, like [`Stack`]).
    pub async fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for EmbeddedRegistry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use docflow_runtime::admin::{TopicSpec, ensure_topics};
    use docflow_runtime::producer::idempotent_producer;
    use rdkafka::Message;
    use rdkafka::consumer::StreamConsumer;
    use rdkafka::producer::FutureRecord;

    async fn produce(kafka: &KafkaArgs, topic: &str, n: usize) {
        let producer = idempotent_producer(kafka, "embedded-test").unwrap();
        for i in 0..n {
            let key = format!("k{i}");
            producer
                .send(
                    FutureRecord::to(topic).key(&key).payload(&key),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
        }
    }

    async fn consume_all(kafka: &KafkaArgs, topic: &str, n: usize) -> Vec<String> {
        let consumer: StreamConsumer = kafka
            .client_config("embedded-test")
            .set("group.id", unique_name("g"))
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&[topic]).unwrap();
        let mut got = Vec::new();
        while got.len() < n {
            let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                .await
                .expect("timed out consuming")
                .unwrap();
            got.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
        }
        got.sort();
        got
    }

    #[tokio::test]
    async fn brokers_get_their_own_ports() {
        let a = Broker::start().await.unwrap();
        let b = Broker::start().await.unwrap();
        assert_ne!(a.bootstrap_servers(), b.bootstrap_servers());
        assert!(!a.bootstrap_servers().ends_with(":9092"));
        let topic = unique_name("own");
        ensure_topics(
            &a.kafka_args(),
            &[TopicSpec::new(&topic, 2)],
            Duration::from_secs(20),
        )
        .await
        .unwrap();
        let on_b = docflow_runtime::admin::partition_count(
            &b.kafka_args(),
            &topic,
            Duration::from_secs(5),
        );
        assert!(
            !matches!(on_b, Ok(Some(_))),
            "a topic on one broker must not appear on another: {on_b:?}"
        );
    }

    /// SQLite storage keeps acknowledged records across a SIGKILL of the broker.
    #[tokio::test]
    async fn sqlite_storage_survives_kill_9() {
        let mut broker = Broker::start_with(Storage::Sqlite).await.unwrap();
        let kafka = broker.kafka_args();
        let topic = unique_name("durable");
        ensure_topics(
            &kafka,
            &[TopicSpec::new(&topic, 3)],
            Duration::from_secs(20),
        )
        .await
        .unwrap();
        produce(&kafka, &topic, 30).await;
        broker.restart().await.unwrap();
        let got = consume_all(&kafka, &topic, 30).await;
        let mut want: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
        want.sort();
        assert_eq!(got, want);
    }

    /// A broker that dies at start is reported with its exit status and log.
    #[tokio::test]
    async fn a_broker_that_exits_is_reported() {
        let err = Broker::start_binary(Path::new("/bin/false"), Storage::Memory)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, EmbeddedError::BrokerNotReady { reason, .. } if reason.contains("exited")),
            "{err}"
        );
        assert!(unique_name("t").starts_with("t-"));
        assert_ne!(unique_name("t"), unique_name("t"));
    }
}
