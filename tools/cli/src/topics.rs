use std::time::Duration;

use docflow_config::KafkaArgs;
use docflow_events::topics::{DOC_PROCESSED, DOC_UPLOADED};
use docflow_runtime::admin::{TopicSpec, ensure_topics};

/// Partitions of `doc.uploaded`: the ceiling of consumer replicas per group.
pub(crate) const UPLOADED_PARTITIONS: i32 = 12;
/// Partitions of `doc.processed`.
pub(crate) const PROCESSED_PARTITIONS: i32 = 6;

/// docflow's topics.
pub(crate) fn specs(uploaded_partitions: i32, replication: i32) -> Vec<TopicSpec> {
    let mut uploaded = TopicSpec::new(DOC_UPLOADED, uploaded_partitions);
    let mut processed = TopicSpec::new(DOC_PROCESSED, PROCESSED_PARTITIONS);
    uploaded.replication = replication;
    processed.replication = replication;
    vec![uploaded, processed]
}

pub(crate) async fn create(
    kafka: &KafkaArgs,
    uploaded_partitions: i32,
    replication: i32,
) -> anyhow::Result<()> {
    let specs = specs(uploaded_partitions, replication);
    ensure_topics(kafka, &specs, Duration::from_secs(30)).await?;
    for s in &specs {
        println!(
            "{:<16} partitions={} replication={}",
            s.name, s.partitions, s.replication
        );
    }
    Ok(())
}
