//! The rollup's test bed: the stack harness (broker, registry, database), replicas of the
//! real binary, events produced through the codec, and the recount from the topic.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use docflow_events::{DocProcessed, DocUploaded, EventCodec, Outcome};
use docflow_runtime::producer::idempotent_producer;
pub use docflow_stack::process::{Replica, metric};
use docflow_stack::{Stack, free_port, unique_name};
use docflow_store::analytics::HOUR_MS;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sqlx::{AnyPool, Row};

/// Which database the stack gets.
#[derive(Debug, Clone, Copy)]
pub enum Db {
    /// A SQLite file.
    Sqlite,
    /// PostgreSQL when DATABASE_URL is set, else SQLite.
    FromEnv,
}

/// (tenant, hour, content type) → (documents, bytes).
pub type Counts = BTreeMap<(String, i64, String), (i64, i64)>;

/// `n` uploads of 4 tenants, 3 content types, spread over three days; `seed` varies them.
pub fn uploads(n: usize, seed: u64) -> Vec<DocUploaded> {
    const TYPES: [&str; 3] = ["application/pdf", "image/png", "image/tiff"];
    let base = 1_796_083_200_000; // 2026-12-01T00:00:00Z
    (0..n)
        .map(|i| {
            let k = i as u64 * 7919 + seed * 104_729;
            DocUploaded {
                document_id: format!("{:064x}", k + 1),
                tenant_id: format!("tenant-{}", k % 4),
                object_uri: format!("tenant-{}/uploads/{k}", k % 4),
                content_type: TYPES[(k / 4 % 3) as usize].to_owned(),
                size_bytes: (k % 1_000_003) as i64 + 1,
                original_file_name: None,
                uploaded_at: base + ((k * 53_000) % (3 * 24 * HOUR_MS as u64)) as i64,
                producer_version: "analytics-test".into(),
            }
        })
        .collect()
}

pub struct Bed {
    pub stack: Stack,
    pub pool: AnyPool,
    pub codec: EventCodec,
    pub group: String,
    pub partitions: i32,
    producer: FutureProducer,
    logs: PathBuf,
}

impl Bed {
    pub async fn new(db: Db, partitions: i32) -> Self {
        let mut builder = Stack::builder().partitions(partitions);
        if matches!(db, Db::Sqlite) {
            builder = builder.sqlite();
        }
        let stack = builder.start().await.unwrap();
        // Migrated here, so the replicas' concurrent migrations find it done.
        let pool = docflow_store::open(&stack.database_url, 4).await.unwrap();
        let codec = EventCodec::from_url(&stack.registry.url(), Duration::from_secs(10)).unwrap();
        let producer = idempotent_producer(&stack.kafka(), "analytics-test").unwrap();
        let group = stack.group("analytics-rollup");
        let logs = std::env::temp_dir().join(unique_name("analytics-logs"));
        std::fs::create_dir_all(&logs).unwrap();
        Bed {
            stack,
            pool,
            codec,
            group,
            partitions,
            producer,
            logs,
        }
    }

    pub fn uploaded_topic(&self) -> &str {
        &self.stack.topics.uploaded
    }

    /// A replica of the real binary on this stack, with `extra` arguments (`--group` in
    /// them replaces the bed's group).
    pub fn spawn(&self, name: &str, extra: &[&str]) -> Replica {
        let group = match extra.iter().position(|a| *a == "--group") {
            Some(i) => extra[i + 1].to_owned(),
            None => self.group.clone(),
        };
        let extra: Vec<&str> = match extra.iter().position(|a| *a == "--group") {
            Some(i) => [&extra[..i], &extra[i + 2..]].concat(),
            None => extra.to_vec(),
        };
        let metrics_port = free_port().unwrap();
        let log = std::fs::File::create(self.logs.join(format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_docflow-analytics-rollup"));
        cmd.args([
            "--kafka-bootstrap-servers",
            &self.stack.broker.bootstrap_servers(),
            "--schema-registry-url",
            &self.stack.registry.url(),
            "--database-url",
            &self.stack.database_url,
            "--database-max-connections",
            "4",
            "--topic",
            &self.stack.topics.uploaded,
            "--processed-topic",
            &self.stack.topics.processed,
            "--group",
            &group,
            "--metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
            "--session-timeout",
            "6s",
            "--retry-backoff",
            "10ms",
            "--retry-backoff-max",
            "200ms",
        ])
        .args(&extra)
        .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        Replica::spawn(cmd, name, metrics_port).unwrap()
    }

    async fn send(&self, topic: &str, key: &str, value: Vec<u8>) {
        self.producer
            .send(
                FutureRecord::to(topic).key(key).payload(&value),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }

    /// Produces `events` to the uploads topic, keyed by document id, and waits for the acks.
    pub async fn produce(&self, events: &[DocUploaded]) {
        let mut pending = Vec::new();
        for e in events {
            let value = self.codec.encode(e).await.unwrap();
            pending.push(
                self.producer
                    .send_result(
                        FutureRecord::to(self.uploaded_topic())
                            .key(&e.document_id)
                            .payload(&value),
                    )
                    .unwrap(),
            );
        }
        for p in pending {
            p.await.unwrap().map_err(|(e, _)| e).unwrap();
        }
    }

    /// Produces `events` in chunks of `chunk` every `every`, in the background.
    pub fn produce_paced(
        &self,
        events: Vec<DocUploaded>,
        chunk: usize,
        every: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let codec =
            EventCodec::from_url(&self.stack.registry.url(), Duration::from_secs(10)).unwrap();
        let (producer, topic) = (self.producer.clone(), self.uploaded_topic().to_owned());
        tokio::spawn(async move {
            for part in events.chunks(chunk) {
                let mut pending = Vec::new();
                for e in part {
                    let value = codec.encode(e).await.unwrap();
                    pending.push(
                        producer
                            .send_result(
                                FutureRecord::to(&topic).key(&e.document_id).payload(&value),
                            )
                            .unwrap(),
                    );
                }
                for p in pending {
                    p.await.unwrap().map_err(|(e, _)| e).unwrap();
                }
                tokio::time::sleep(every).await;
            }
        })
    }

    /// A record that is not Avro at all.
    pub async fn produce_raw(&self, value: &[u8]) {
        self.send(
            &self.stack.topics.uploaded.clone(),
            "poison",
            value.to_vec(),
        )
        .await;
    }

    /// The `doc.processed` of `stage` for `upload`.
    pub fn processed(&self, upload: &DocUploaded, stage: &str, outcome: Outcome) -> DocProcessed {
        DocProcessed {
            document_id: upload.document_id.clone(),
            tenant_id: upload.tenant_id.clone(),
            stage: stage.into(),
            stage_version: 1,
            outcome,
            result_ref: None,
            duration_ms: 5,
            finished_at: upload.uploaded_at + 1_000,
        }
    }

    pub async fn produce_processed(&self, events: &[DocProcessed]) {
        for e in events {
            let value = self.codec.encode(e).await.unwrap();
            let topic = self.stack.topics.processed.clone();
            self.send(&topic, &e.document_id, value).await;
        }
    }

    /// What the rollup holds: uploads by (tenant, hour, content type).
    pub async fn counts(&self) -> Counts {
        let rows = sqlx::query(
            "SELECT tenant_id, hour_ms, content_type, documents, bytes FROM analytics_uploads",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap();
        rows.into_iter()
            .map(|r| {
                (
                    (r.get(0), r.get(1), r.get(2)),
                    (r.get::<i64, _>(3), r.get::<i64, _>(4)),
                )
            })
            .collect()
    }

    async fn scalar(&self, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn counted_documents(&self) -> i64 {
        self.scalar("SELECT CAST(COALESCE(SUM(documents), 0) AS BIGINT) FROM analytics_uploads")
            .await
    }

    pub async fn outcomes(&self) -> i64 {
        self.scalar("SELECT CAST(COALESCE(SUM(documents), 0) AS BIGINT) FROM analytics_outcomes")
            .await
    }

    pub async fn dead_lettered(&self) -> i64 {
        self.scalar("SELECT CAST(COALESCE(SUM(records), 0) AS BIGINT) FROM analytics_dead_letters")
            .await
    }

    async fn wait_for(&self, what: &str, n: i64, timeout: Duration, sql: &str) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let have = self.scalar(sql).await;
            if have >= n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {have} of {n} {what} after {timeout:?}\n{}",
                self.logs_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_documents(&self, n: i64, timeout: Duration) {
        self.wait_for(
            "documents",
            n,
            timeout,
            "SELECT CAST(COALESCE(SUM(documents), 0) AS BIGINT) FROM analytics_uploads",
        )
        .await;
    }

    pub async fn wait_outcomes(&self, n: i64, timeout: Duration) {
        self.wait_for(
            "outcomes",
            n,
            timeout,
            "SELECT CAST(COALESCE(SUM(documents), 0) AS BIGINT) FROM analytics_outcomes",
        )
        .await;
    }

    pub async fn wait_dead_lettered(&self, n: i64, timeout: Duration) {
        self.wait_for(
            "dead letters",
            n,
            timeout,
            "SELECT CAST(COALESCE(SUM(records), 0) AS BIGINT) FROM analytics_dead_letters",
        )
        .await;
    }

    /// The recount: every record of the uploads topic read back with a plain consumer and
    /// decoded; undecodable ones counted apart.
    pub async fn recount(&self) -> (Counts, i64) {
        let records = self.stack.records(self.uploaded_topic()).await.unwrap();
        let mut counts = Counts::new();
        let mut undecodable = 0;
        for (_, value) in records {
            match self.codec.decode::<DocUploaded>(&value).await {
                Ok(e) => {
                    let hour = e.uploaded_at - e.uploaded_at.rem_euclid(HOUR_MS);
                    let c = counts
                        .entry((e.tenant_id, hour, e.content_type))
                        .or_default();
                    c.0 += 1;
                    c.1 += e.size_bytes;
                }
                Err(_) => undecodable += 1,
            }
        }
        (counts, undecodable)
    }

    pub async fn assert_counts_equal_recount(&self) {
        let (expected, undecodable) = self.recount().await;
        let got = self.counts().await;
        if got != expected {
            let diff: Vec<_> = expected
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(*v))
                .map(|(k, v)| format!("{k:?}: expected {v:?}, got {:?}", got.get(k)))
                .chain(
                    got.keys()
                        .filter(|k| !expected.contains_key(*k))
                        .map(|k| format!("{k:?}: not in the topic")),
                )
                .take(10)
                .collect();
            panic!(
                "the rollup differs from the recount in {} cells, e.g.\n{}\n{}",
                diff.len(),
                diff.join("\n"),
                self.logs_tail()
            );
        }
        assert_eq!(
            self.dead_lettered().await,
            undecodable,
            "every undecodable record is counted as dead-lettered, once"
        );
    }

    /// Every record of the group's DLQ for the uploads topic: (value, error class).
    pub async fn dead_letters(&self) -> Vec<(String, String)> {
        let dlq = docflow_runtime::dlq::topic_for(self.uploaded_topic(), &self.group);
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

    /// Commits offset 0 for every partition of both topics in the group (no member runs).
    pub fn reset_kafka_offsets_to_beginning(&self) {
        let c: BaseConsumer = self
            .stack
            .kafka()
            .client_config("analytics-test-reset")
            .set("group.id", &self.group)
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for topic in [&self.stack.topics.uploaded, &self.stack.topics.processed] {
            for p in 0..self.partitions {
                tpl.add_partition_offset(topic, p, Offset::Offset(0))
                    .unwrap();
            }
        }
        c.commit(&tpl, CommitMode::Sync).unwrap();
    }

    /// The whole log of replica `name`.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default()
    }

    pub fn logs_tail(&self) -> String {
        docflow_stack::process::logs_tail(&self.logs, 12)
    }

    pub async fn finish(self) {
        let _ = std::fs::remove_dir_all(&self.logs);
        self.pool.close().await;
        self.stack.stop().await.unwrap();
    }
}
