//! `docflow autoscale explain`: what a ScaledObject decides for given offsets and replicas —
//! KEDA's Kafka scaler and the HPA as `docflow_autoscale` computes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Subcommand;
use docflow_autoscale::explain::{ScaledObject, Trigger, TriggerKind, explain};
use docflow_autoscale::hpa::{Hpa, Policy, Rules};
use docflow_autoscale::keda::{KafkaTrigger, PartitionOffsets, PersistentLagMemory, Scaler};
use docflow_infra::render::{id, read_documents};
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub(crate) enum AutoscaleCommand {
    /// Print each trigger's metric and activity and the replicas KEDA + the HPA settle on.
    Explain {
        /// A ScaledObject manifest (or `docflow infra render` output holding several).
        #[arg(long)]
        scaled_object: PathBuf,
        /// Which ScaledObject of the file (needed when it holds more than one): its name, its
        /// service's (`ocr-embeddings`), or a part of the name only it has (`ocr`).
        #[arg(long)]
        name: Option<String>,
        /// Offsets, one JSON file per poll, in order (the scaler remembers commits between
        /// polls for `excludePersistentLag`): `{"topic": [{"partition": 0, "committed": 12,
        /// "latest": 40}, ...]}`; `committed` null or -1 when the group has none.
        #[arg(
            long = "partitions",
            required_unless_present = "live",
            conflicts_with = "live"
        )]
        partitions: Vec<PathBuf>,
        /// Read the offsets from the broker instead (`--kafka-bootstrap-servers`): every Kafka
        /// trigger's topic, for its `consumerGroup` (or `--group`), as KEDA's poll would.
        #[arg(long)]
        live: bool,
        /// With `--live`: the consumer group to read instead of each trigger's.
        #[arg(long, requires = "live")]
        group: Option<String>,
        /// With `--live`: polls to take, `--poll-interval` apart (the scaler remembers
        /// commits between polls for `excludePersistentLag`).
        #[arg(long, default_value_t = 1, requires = "live")]
        polls: usize,
        /// Time between live polls.
        #[arg(long, default_value = "15s", value_parser = docflow_config::parse_duration)]
        poll_interval: std::time::Duration,
        /// The broker, with `--live`.
        #[command(flatten)]
        kafka: docflow_config::KafkaArgs,
        /// Current replicas.
        #[arg(long)]
        replicas: u32,
        /// The metric of a non-Kafka trigger, by trigger name (`upload-rate=180`).
        #[arg(long = "metric", value_parser = parse_metric)]
        metrics: Vec<(String, f64)>,
    },
}

fn parse_metric(s: &str) -> Result<(String, f64), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=VALUE"))?;
    let v: f64 = v.parse().map_err(|e| format!("{s:?}: {e}"))?;
    Ok((k.to_owned(), v))
}

pub(crate) async fn run(cmd: AutoscaleCommand) -> anyhow::Result<()> {
    let AutoscaleCommand::Explain {
        scaled_object,
        name,
        partitions,
        live,
        group,
        polls,
        poll_interval,
        kafka,
        replicas,
        metrics,
    } = cmd;
    let docs = read_documents(&scaled_object)?;
    let so = scaled_object_from(&docs, name.as_deref())?;
    let metrics: BTreeMap<String, f64> = metrics.into_iter().collect();
    let mut memory = PersistentLagMemory::default();
    let mut current = replicas;
    println!(
        "ScaledObject {}: minReplicaCount {}, maxReplicaCount {}",
        so.name, so.min_replica_count, so.max_replica_count
    );
    let rounds = if live { polls.max(1) } else { partitions.len() };
    for i in 0..rounds {
        let (offsets, source) = if live {
            if i > 0 {
                tokio::time::sleep(poll_interval).await;
            }
            (
                live_offsets(&so, &kafka, group.as_deref()).await?,
                format!("live from {}", kafka.bootstrap_servers),
            )
        } else {
            let file = partitions.get(i).context("no offsets file for this poll")?;
            (offsets_from(file)?, file.display().to_string())
        };
        let e =
            explain(&so, &offsets, &metrics, current, &mut memory).map_err(anyhow::Error::msg)?;
        if rounds > 1 {
            println!(
                "poll {} ({source}), {}:",
                i + 1,
                replica_count(u64::from(current))
            );
        } else if live {
            println!("{} now ({source})", replica_count(u64::from(current)));
        } else {
            println!("{} now", replica_count(u64::from(current)));
        }
        for t in &e.triggers {
            println!(
                "  trigger {}: {}; target {} per replica → {}",
                t.name,
                t.detail,
                t.target,
                replica_count(u64::from(t.proposal))
            );
        }
        println!("  active: {}", if e.active { "yes" } else { "no" });
        println!("  desired replicas: {}", e.desired);
        println!("  next sync: {} ({})", e.next, e.reason);
        current = e.desired;
    }
    Ok(())
}

/// Each Kafka trigger's topic read from the broker for its group (or `group`): committed
/// offsets and log ends, as KEDA's scaler reads them.
async fn live_offsets(
    so: &ScaledObject,
    kafka: &docflow_config::KafkaArgs,
    group: Option<&str>,
) -> anyhow::Result<BTreeMap<String, Vec<PartitionOffsets>>> {
    let mut wanted: Vec<(String, String)> = Vec::new();
    for t in &so.triggers {
        if let TriggerKind::Kafka(k) = &t.kind {
            if k.topics.is_empty() {
                let which = match k.scaler {
                    Scaler::Kafka => "every topic its group committed on",
                    Scaler::ApacheKafka => "every topic of the cluster",
                };
                bail!(
                    "trigger {} has no topic ({which}): give its offsets with --partitions",
                    t.name
                );
            }
            let group = group.unwrap_or(&k.consumer_group).to_owned();
            // An empty item of an `apache-kafka` list (`a,,b`) matches no topic.
            for topic in k.topics.iter().filter(|t| !t.is_empty()) {
                if let Some((_, other)) = wanted.iter().find(|(t, g)| t == topic && *g != group) {
                    bail!(
                        "triggers read topic {topic} for groups {other} and {group}: explain them one at a time with --partitions"
                    );
                }
                if !wanted.iter().any(|(t, _)| t == topic) {
                    wanted.push((topic.clone(), group.clone()));
                }
            }
        }
    }
    let servers = kafka.bootstrap_servers.clone();
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || {
        let mut out = BTreeMap::new();
        for (topic, group) in wanted {
            let c = docflow_replay::broker::client_as(&kafka, &group, "docflow-autoscale")?;
            // `apache-kafka` skips a listed topic the broker does not have.
            let list = match docflow_replay::health::offsets(&c, &topic) {
                Err(docflow_replay::ReplayError::NoSuchTopic(_)) => continue,
                other => other?,
            }
                .into_iter()
                .map(|o| PartitionOffsets {
                    partition: o.partition,
                    committed: o.committed,
                    latest: o.log_end,
                })
                .collect();
            out.insert(topic, list);
        }
        Ok::<_, docflow_replay::ReplayError>(out)
    })
    .await?
    .with_context(|| {
        format!(
            "reading the triggers' offsets from broker {servers} (set by --kafka-bootstrap-servers or KAFKA_BOOTSTRAP_SERVERS)"
        )
    })
}

fn offsets_from(path: &Path) -> anyhow::Result<BTreeMap<String, Vec<PartitionOffsets>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let Value::Object(topics) = v else {
        bail!(
            "{}: expected {{\"topic\": [partitions...]}}",
            path.display()
        );
    };
    let mut out = BTreeMap::new();
    for (topic, parts) in topics {
        let parts = parts
            .as_array()
            .with_context(|| format!("{}: {topic}: expected a list", path.display()))?;
        let mut list = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let field = |k: &str| p.get(k).and_then(Value::as_i64);
            let latest = field("latest").with_context(|| {
                format!("{}: {topic}[{i}]: no \"latest\" offset", path.display())
            })?;
            list.push(PartitionOffsets {
                partition: field("partition")
                    .and_then(|n| i32::try_from(n).ok())
                    .unwrap_or(i32::try_from(i).unwrap_or(i32::MAX)),
                committed: field("committed").filter(|c| *c >= 0),
                latest,
            });
        }
        out.insert(topic, list);
    }
    Ok(out)
}

/// The scale target's environment (its containers' plain values and the ConfigMaps they
/// take whole), where the file holds them: what KEDA resolves `...FromEnv` against.
fn resolved_env(docs: &[Value], target: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let Some(d) = docs
        .iter()
        .find(|d| id(d) == ("Deployment".into(), target.into()))
    else {
        return env;
    };
    let containers = d
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in containers {
        for from in c
            .get("envFrom")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(cm) = from.pointer("/configMapRef/name").and_then(Value::as_str) else {
                continue;
            };
            if let Some(data) = docs
                .iter()
                .find(|d| id(d) == ("ConfigMap".into(), cm.into()))
                .and_then(|d| d.get("data"))
                .and_then(Value::as_object)
            {
                for (k, v) in data {
                    if let Some(v) = v.as_str() {
                        env.insert(k.clone(), v.to_owned());
                    }
                }
            }
        }
        for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
            if let (Some(k), Some(v)) = (
                e.get("name").and_then(Value::as_str),
                e.get("value").and_then(Value::as_str),
            ) {
                env.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    env
}

fn rules(v: Option<&Value>, default: Rules) -> anyhow::Result<Rules> {
    let Some(v) = v else {
        return Ok(default);
    };
    let stabilization_s = v
        .get("stabilizationWindowSeconds")
        .and_then(Value::as_u64)
        .map_or(default.stabilization_s, |s| {
            u32::try_from(s).unwrap_or(u32::MAX)
        });
    if v.get("selectPolicy")
        .and_then(Value::as_str)
        .is_some_and(|p| p != "Max")
    {
        bail!("only selectPolicy Max is modelled");
    }
    let policies = match v.get("policies").and_then(Value::as_array) {
        None => default.policies,
        Some(list) => list
            .iter()
            .map(|p| {
                let n = |k: &str| {
                    p.get(k)
                        .and_then(Value::as_u64)
                        .and_then(|n| u32::try_from(n).ok())
                        .with_context(|| format!("policy without {k}"))
                };
                Ok(match p.get("type").and_then(Value::as_str) {
                    Some("Pods") => Policy::Pods {
                        value: n("value")?,
                        period_s: n("periodSeconds")?,
                    },
                    Some("Percent") => Policy::Percent {
                        value: n("value")?,
                        period_s: n("periodSeconds")?,
                    },
                    other => bail!("unknown policy type {other:?}"),
                })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    Ok(Rules {
        stabilization_s,
        policies,
    })
}

/// The ScaledObject `name` names: its exact name, else the one of that service
/// (`ocr-embeddings` for `docflow-ocr-embeddings`), else the only one whose name contains it
/// (`ocr`).
fn scaled_object_from(docs: &[Value], name: Option<&str>) -> anyhow::Result<ScaledObject> {
    let all: Vec<&Value> = docs.iter().filter(|d| id(d).0 == "ScaledObject").collect();
    let matching = |test: &dyn Fn(&str) -> bool| -> Vec<&Value> {
        all.iter().copied().filter(|d| test(&id(d).1)).collect()
    };
    let candidates: Vec<&Value> = match name {
        None => all.clone(),
        Some(n) => [
            matching(&|s: &str| s == n),
            matching(&|s: &str| s == format!("docflow-{n}")),
            matching(&|s: &str| s.contains(n)),
        ]
        .into_iter()
        .find(|c| !c.is_empty())
        .unwrap_or_default(),
    };
    let [so] = candidates[..] else {
        bail!(
            "{} ScaledObjects match: name one with --name ({})",
            candidates.len(),
            docs.iter()
                .filter(|d| id(d).0 == "ScaledObject")
                .map(|d| id(d).1)
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let spec = so.get("spec").context("no spec")?;
    let count = |k: &str, default: u32| {
        spec.get(k)
            .and_then(Value::as_u64)
            .map_or(default, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let target = spec
        .pointer("/scaleTargetRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let env = resolved_env(docs, target);
    let behavior = spec.pointer("/advanced/horizontalPodAutoscalerConfig/behavior");
    // Kubernetes' defaults where the ScaledObject says nothing.
    let up = rules(
        behavior.and_then(|b| b.get("scaleUp")),
        Rules {
            stabilization_s: 0,
            policies: vec![
                Policy::Percent {
                    value: 100,
                    period_s: 15,
                },
                Policy::Pods {
                    value: 4,
                    period_s: 15,
                },
            ],
        },
    )?;
    let down = rules(
        behavior.and_then(|b| b.get("scaleDown")),
        Rules {
            stabilization_s: 300,
            policies: vec![Policy::Percent {
                value: 100,
                period_s: 15,
            }],
        },
    )?;
    let min = count("minReplicaCount", 0);
    let max = count("maxReplicaCount", 100);
    let mut triggers = Vec::new();
    for (i, t) in spec
        .get("triggers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or_default();
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("{kind}-{i}"), str::to_owned);
        let metadata: BTreeMap<String, String> = t
            .get("metadata")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                (k.clone(), v)
            })
            .collect();
        let kind = if kind == "kafka" {
            TriggerKind::Kafka(
                KafkaTrigger::from_metadata(&metadata, &env)
                    .map_err(|e| anyhow::anyhow!("trigger {name}: {e}"))?,
            )
        } else if kind == "apache-kafka" {
            TriggerKind::Kafka(
                KafkaTrigger::from_apache_metadata(&metadata, &env)
                    .map_err(|e| anyhow::anyhow!("trigger {name}: {e}"))?,
            )
        } else {
            let f = |k: &str, default: Option<f64>| -> anyhow::Result<f64> {
                match metadata.get(k) {
                    Some(v) => v
                        .trim()
                        .parse()
                        .with_context(|| format!("trigger {name}: {k} {v:?}")),
                    None => default.with_context(|| format!("trigger {name}: no {k}")),
                }
            };
            TriggerKind::Threshold {
                threshold: f("threshold", None)?,
                activation: f("activationThreshold", Some(0.0))?,
            }
        };
        triggers.push(Trigger { name, kind });
    }
    if triggers.is_empty() {
        bail!("ScaledObject {} has no triggers", id(so).1);
    }
    Ok(ScaledObject {
        name: id(so).1,
        min_replica_count: min,
        max_replica_count: max,
        hpa: Hpa {
            min_replicas: min.max(1),
            max_replicas: max,
            target: 1.0,
            tolerance: 0.1,
            up,
            down,
        },
        triggers,
    })
}

/// `n replica(s)`, in English.
fn replica_count(n: u64) -> String {
    if n == 1 {
        "1 replica".to_owned()
    } else {
        format!("{n} replicas")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_replica_is_not_plural() {
        assert_eq!(super::replica_count(1), "1 replica");
        assert_eq!(super::replica_count(0), "0 replicas");
        assert_eq!(super::replica_count(3), "3 replicas");
    }
}
