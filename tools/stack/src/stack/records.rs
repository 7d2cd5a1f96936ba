//! Topics of a [`Stack`] read back: their records, and a group's committed offsets on them.

use std::time::Duration;

use docflow_config::KafkaArgs;
use docflow_runtime::admin::{TopicSpec, ensure_topics};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::Stack;
use crate::{EmbeddedError, unique_name};

/// A record as read back: (key, value).
pub type KeyValue = (Vec<u8>, Vec<u8>);

impl Stack {
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
