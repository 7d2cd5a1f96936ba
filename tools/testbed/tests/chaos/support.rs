use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use docflow_config::KafkaArgs;
use docflow_runtime::producer::idempotent_producer;
pub use docflow_stack::process::{Replica, metric};
use docflow_stack::{Stack, free_port, unique_name};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sqlx::{AnyPool, Row};

/// The stack harness (broker, database) with a topic of `partitions` for one test.
pub struct Bed {
    pub stack: Stack,
    pub pool: AnyPool,
    pub topic: String,
    pub group: String,
    pub partitions: i32,
    logs: PathBuf,
}

impl Bed {
    pub async fn new(partitions: i32) -> Self {
        let stack = Stack::builder().start().await.unwrap();
        let pool = docflow_store::connect(&stack.database_url, 4)
            .await
            .unwrap();
        let topic = stack.topic("chaos", partitions).await.unwrap();
        let group = unique_name("group");
        let logs = std::env::temp_dir().join(unique_name("testbed-logs"));
        std::fs::create_dir_all(&logs).unwrap();
        Bed {
            stack,
            pool,
            topic,
            group,
            partitions,
            logs,
        }
    }

    pub fn kafka(&self) -> KafkaArgs {
        self.stack.kafka()
    }

    /// Produces `ids` as payloads (key = payload) to the topic.
    pub async fn produce(&self, ids: &[String]) {
        let producer = idempotent_producer(&self.kafka(), "chaos-producer").unwrap();
        let mut pending = Vec::new();
        for id in ids {
            pending.push(
                producer
                    .send_result(FutureRecord::to(&self.topic).key(id).payload(id))
                    .unwrap(),
            );
        }
        for p in pending {
            p.await.unwrap().map_err(|(e, _)| e).unwrap();
        }
    }

    /// Starts a replica with extra arguments.
    pub fn spawn(&self, name: &str, extra: &[&str]) -> Replica {
        let metrics_port = free_port().unwrap();
        let log = std::fs::File::create(self.logs.join(format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_docflow-testbed"));
        cmd.args([
            "--topic",
            &self.topic,
            "--group",
            &self.group,
            "--kafka-bootstrap-servers",
            &self.stack.broker.bootstrap_servers(),
            "--database-url",
            &self.stack.database_url,
            "--database-max-connections",
            "4",
            "--metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
            "--session-timeout",
            "6s",
            "--retry-backoff",
            "10ms",
            "--retry-backoff-max",
            "50ms",
        ])
        .args(extra)
        .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        Replica::spawn(cmd, name, metrics_port).unwrap()
    }

    /// Every record of the group's dead-letter topic: (value, error class header).
    pub async fn dead_letters(&self) -> Vec<(String, String)> {
        let dlq = docflow_runtime::dlq::topic_for(&self.topic, &self.group);
        let class = docflow_runtime::dlq::headers::ERROR_CLASS;
        let read = self.stack.records_with_header(&dlq, class).await.unwrap();
        read.into_iter()
            .map(|((_, value), class)| {
                (
                    String::from_utf8_lossy(&value).into_owned(),
                    class.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Every dead letter's error message header.
    pub async fn dead_letter_messages(&self) -> Vec<String> {
        let dlq = docflow_runtime::dlq::topic_for(&self.topic, &self.group);
        let header = docflow_runtime::dlq::headers::ERROR_MESSAGE;
        let read = self.stack.records_with_header(&dlq, header).await.unwrap();
        read.into_iter()
            .map(|(_, m)| m.unwrap_or_default())
            .collect()
    }

    /// Deliveries claimed at or after `since_ms` and still in hand.
    pub async fn claims_since(&self, since_ms: i64) -> i64 {
        sqlx::query(
            "SELECT COUNT(*) FROM deliveries WHERE consumer_group = $1 AND held = 1 \
             AND last_at_ms >= $2",
        )
        .bind(&self.group)
        .bind(since_ms)
        .fetch_one(&self.pool)
        .await
        .map(|r| r.get::<i64, _>(0))
        .unwrap_or(0)
    }

    /// Deliveries the crash-counting ledger holds unreleased, over the group's records.
    pub async fn claims(&self) -> i64 {
        sqlx::query(
            "SELECT CAST(COALESCE(SUM(held), 0) AS BIGINT) FROM deliveries WHERE consumer_group = $1",
        )
            .bind(&self.group)
            .fetch_one(&self.pool)
            .await
            .map(|r| r.get::<i64, _>(0))
            .unwrap_or(0)
    }

    pub async fn rows(&self) -> i64 {
        sqlx::query("SELECT COUNT(*) FROM testbed_rows")
            .fetch_one(&self.pool)
            .await
            .map(|r| r.get::<i64, _>(0))
            .unwrap_or(0)
    }

    pub async fn row_ids(&self) -> Vec<String> {
        let rows = sqlx::query("SELECT msg_id FROM testbed_rows ORDER BY msg_id")
            .fetch_all(&self.pool)
            .await
            .unwrap();
        rows.into_iter().map(|r| r.get::<String, _>(0)).collect()
    }

    pub async fn redeliveries(&self) -> i64 {
        sqlx::query("SELECT COALESCE(SUM(n), 0) FROM testbed_redeliveries")
            .fetch_one(&self.pool)
            .await
            .map(|r| r.get::<i64, _>(0))
            .unwrap_or(0)
    }

    /// Waits until `n` rows exist; panics with the replica logs after `timeout`.
    pub async fn wait_rows(&self, n: i64, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let have = self.rows().await;
            if have >= n {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "only {have} of {n} rows after {timeout:?}\n{}",
                    self.logs_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Committed offsets of the group per partition.
    pub fn committed(&self) -> HashMap<i32, i64> {
        let c: BaseConsumer = self
            .kafka()
            .client_config("chaos-inspector")
            .set("group.id", &self.group)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..self.partitions {
            tpl.add_partition(&self.topic, p);
        }
        let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
        got.elements()
            .iter()
            .map(|e| {
                let o = match e.offset() {
                    Offset::Offset(o) => o,
                    _ => 0,
                };
                (e.partition(), o)
            })
            .collect()
    }

    /// Log-end offsets per partition.
    pub fn log_end(&self) -> HashMap<i32, i64> {
        let c: BaseConsumer = self
            .kafka()
            .client_config("chaos-inspector")
            .create()
            .unwrap();
        (0..self.partitions)
            .map(|p| {
                let (_, high) = c
                    .fetch_watermarks(&self.topic, p, Duration::from_secs(10))
                    .unwrap();
                (p, high)
            })
            .collect()
    }

    pub fn logs_tail(&self) -> String {
        docflow_stack::process::logs_tail(&self.logs, 15)
    }

    pub async fn finish(self) {
        let _ = std::fs::remove_dir_all(&self.logs);
        self.pool.close().await;
        self.stack.stop().await.unwrap();
    }
}

pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:06}")).collect()
}
