//! Topic administration: declare topics once, idempotently, and wait until they are usable.

use std::time::{Duration, Instant};

use docflow_config::KafkaArgs;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;

use crate::RuntimeError;

/// A topic docflow needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Name.
    pub name: String,
    /// Partition count (the upper bound of consumer parallelism per group).
    pub partitions: i32,
    /// Replication factor (1 on the embedded broker; 3 in production).
    pub replication: i32,
    /// Topic configs, e.g. `retention.ms`.
    pub config: Vec<(String, String)>,
}

impl TopicSpec {
    /// A topic with `partitions` partitions and replication factor 1.
    pub fn new(name: impl Into<String>, partitions: i32) -> Self {
        TopicSpec {
            name: name.into(),
            partitions,
            replication: 1,
            config: Vec::new(),
        }
    }
}

/// Creates the topics that do not exist yet (existing ones are left as they are) and waits
/// until the broker reports every partition of each.
pub async fn ensure_topics(
    kafka: &KafkaArgs,
    specs: &[TopicSpec],
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let admin: AdminClient<DefaultClientContext> = kafka
        .client_config("docflow-admin")
        .create()
        .map_err(RuntimeError::kafka("creating admin client"))?;
    let new_topics: Vec<NewTopic<'_>> = specs
        .iter()
        .map(|s| {
            let mut t = NewTopic::new(
                &s.name,
                s.partitions,
                TopicReplication::Fixed(s.replication),
            );
            for (k, v) in &s.config {
                t = t.set(k, v);
            }
            t
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(timeout));
    let results = admin
        .create_topics(new_topics.iter(), &opts)
        .await
        .map_err(RuntimeError::kafka("CreateTopics"))?;
    let mut wait_for = specs.to_vec();
    for r in results {
        match r {
            Ok(name) => tracing::info!(topic = %name, "topic created"),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                // Left as it is: wait for it to be visible, whatever its partition count.
                tracing::debug!(topic = %name, "topic exists");
                for s in wait_for.iter_mut().filter(|s| s.name == name) {
                    s.partitions = 1;
                }
            }
            Err((name, code)) => {
                return Err(RuntimeError::CreateTopic {
                    topic: name,
                    reason: code.to_string(),
                });
            }
        }
    }
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || wait_for_partitions(&kafka, &wait_for, timeout))
        .await
        .map_err(|e| RuntimeError::Timeout(format!("metadata wait task failed: {e}")))?
}

// Runs on a blocking thread (spawn_blocking), so sleeping between metadata polls is fine.
#[allow(clippy::disallowed_methods)]
fn wait_for_partitions(
    kafka: &KafkaArgs,
    specs: &[TopicSpec],
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let consumer: BaseConsumer = kafka
        .client_config("docflow-admin")
        .create()
        .map_err(RuntimeError::kafka("creating metadata client"))?;
    let deadline = Instant::now() + timeout;
    loop {
        let ready = consumer
            .fetch_metadata(None, Duration::from_secs(5))
            .map(|md| {
                specs.iter().all(|s| {
                    md.topics().iter().any(|t| {
                        t.name() == s.name
                            && t.error().is_none()
                            && t.partitions().len() >= usize::try_from(s.partitions).unwrap_or(0)
                    })
                })
            })
            .unwrap_or(false);
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(RuntimeError::Timeout(format!(
                "topics {:?} not visible in metadata after {timeout:?}",
                specs.iter().map(|s| &s.name).collect::<Vec<_>>()
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Partition count of `topic` as the broker reports it (`None` if it does not exist).
pub fn partition_count(
    kafka: &KafkaArgs,
    topic: &str,
    timeout: Duration,
) -> Result<Option<usize>, RuntimeError> {
    let consumer: BaseConsumer = kafka
        .client_config("docflow-admin")
        .create()
        .map_err(RuntimeError::kafka("creating metadata client"))?;
    let md = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(RuntimeError::kafka("Metadata"))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map(|t| t.partitions().len()))
}
