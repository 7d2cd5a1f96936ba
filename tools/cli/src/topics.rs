use std::time::Duration;

use anyhow::Context;
use docflow_config::KafkaArgs;
use docflow_events::topics::{DOC_UPLOADED, TABLE};
use docflow_runtime::admin::{TopicSpec, ensure_topics};

/// docflow's topics from the table in `docflow_events::topics`, with `doc.uploaded`'s
/// partition count overridden.
fn specs(uploaded_partitions: i32, replication: i32) -> Vec<TopicSpec> {
    TABLE
        .iter()
        .map(|t| {
            let partitions = if t.name == DOC_UPLOADED {
                uploaded_partitions
            } else {
                t.partitions
            };
            let mut spec = TopicSpec::new(t.name, partitions);
            spec.replication = replication;
            spec
        })
        .collect()
}

pub(crate) async fn create(
    kafka: &KafkaArgs,
    uploaded_partitions: i32,
    replication: i32,
) -> anyhow::Result<()> {
    let specs = specs(uploaded_partitions, replication);
    ensure_topics(kafka, &specs, Duration::from_secs(30))
        .await
        .with_context(|| {
            format!(
                "broker {} (set by --kafka-bootstrap-servers or KAFKA_BOOTSTRAP_SERVERS)",
                kafka.bootstrap_servers
            )
        })?;
    for s in &specs {
        println!(
            "{:<16} partitions={} replication={}",
            s.name, s.partitions, s.replication
        );
    }
    Ok(())
}
