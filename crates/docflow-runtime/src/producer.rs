//! The producer every docflow output goes through: idempotent (`enable.idempotence=true`,
//! which implies `acks=all` and bounded in-flight requests), so a retried send never writes a
//! duplicate, and a send is only acknowledged once every in-sync replica has it.

use docflow_config::KafkaArgs;
use rdkafka::producer::FutureProducer;

use crate::RuntimeError;

/// Builds the idempotent producer. `client_id` names the service in broker logs.
pub fn idempotent_producer(
    kafka: &KafkaArgs,
    client_id: &str,
) -> Result<FutureProducer, RuntimeError> {
    let mut cfg = kafka.client_config(client_id);
    // Defaults first; anything given with -X on the command line already won above, so only
    // set what the operator did not.
    for (k, v) in [
        ("enable.idempotence", "true"),
        ("acks", "all"),
        ("linger.ms", "5"),
        ("compression.type", "lz4"),
        ("message.timeout.ms", "30000"),
    ] {
        if !kafka.options.iter().any(|(key, _)| key == k) {
            cfg.set(k, v);
        }
    }
    cfg.create()
        .map_err(RuntimeError::kafka("creating producer"))
}
