use std::path::Path;

use anyhow::Context;
use docflow_config::RegistryArgs;
use docflow_events::schema::{check_history, load_history};
use docflow_events::{CompatibilityLevel, DocProcessed, DocUploaded, EventCodec};

pub(crate) fn check(dir: &Path, level: CompatibilityLevel) -> anyhow::Result<()> {
    let histories =
        load_history(dir).with_context(|| format!("reading schemas from {}", dir.display()))?;
    anyhow::ensure!(
        !histories.is_empty(),
        "no schemas found under {}",
        dir.display()
    );
    check_history(&histories, level)?;
    for h in &histories {
        println!(
            "{:<16} {} version(s), {level} compatible",
            h.topic,
            h.versions.len()
        );
    }
    Ok(())
}

/// Registers the newest schema of each topic; prints subject and id.
pub(crate) async fn register(registry: &RegistryArgs) -> anyhow::Result<()> {
    let codec = codec(registry)?;
    register_all(&codec).await.with_context(|| {
        format!(
            "schema registry {} (set by --schema-registry-url or SCHEMA_REGISTRY_URL)",
            registry.url
        )
    })
}

pub(crate) fn codec(registry: &RegistryArgs) -> anyhow::Result<EventCodec> {
    docflow_runtime::codec(registry).context("schema registry settings")
}

pub(crate) async fn register_all(codec: &EventCodec) -> anyhow::Result<()> {
    let uploaded = codec.schema_id::<DocUploaded>().await?;
    let processed = codec.schema_id::<DocProcessed>().await?;
    println!("registered doc.uploaded-value  id={uploaded}");
    println!("registered doc.processed-value id={processed}");
    Ok(())
}
