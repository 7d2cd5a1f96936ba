//! `docflow status`: each consumer group's health verdict as Burrow judges it (OK, WARN,
//! ERR; per partition OK, WARN, STOP, STALL, REWIND, each with its reason), from a window of
//! samples this command takes from the broker, or from the longer window a running ingest
//! keeps (`--ingest`). Exits non-zero when a group is not OK, for scripts.

use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use docflow_config::KafkaArgs;
use docflow_replay::health::{self, GroupSpec, GroupVerdict, Rules, Status, Tracker};
use docflow_runtime::metrics::now_ms;

/// Options of `docflow status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// A consumer group to judge, `GROUP` or `GROUP@TOPIC[+TOPIC…]` with the topics it reads
    /// (default `--topic`; ingest's `--console-group` values work as they are); repeatable. Default: every stage of the pipeline, each its own
    /// group, on `--topic`, and `analytics-rollup` on `--topic` and `--processed-topic`.
    #[arg(long = "group")]
    groups: Vec<String>,
    /// The topic the groups consume (unless a `--group` names its own).
    #[arg(long, default_value = docflow_events::topics::DOC_UPLOADED)]
    topic: String,
    /// The results topic, which the default `analytics-rollup` also reads.
    #[arg(long, default_value = docflow_events::topics::DOC_PROCESSED)]
    processed_topic: String,
    /// Samples taken from the broker: the window the verdict looks back over.
    #[arg(long, default_value_t = 6)]
    samples: usize,
    /// Time between samples (the command takes samples × this to answer).
    #[arg(long, default_value = "2s", value_parser = docflow_config::parse_duration)]
    interval: Duration,
    /// A lag up to this many records is no lag (Burrow's `allowed-lag`).
    #[arg(long, default_value_t = 0)]
    allowed_lag: u64,
    /// Read the verdicts a running ingest keeps (its console's sampler: a longer window, no
    /// wait) instead of sampling the broker, e.g. `http://127.0.0.1:8080`.
    #[arg(long, env = "DOCFLOW_INGEST_URL")]
    ingest: Option<String>,
    /// Admin token of that ingest (`--admin-token` there).
    #[arg(long, env = "DOCFLOW_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Every partition, not only those that are not OK.
    #[arg(long)]
    all: bool,
    /// How to print the verdicts.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The broker (when sampling it).
    #[command(flatten)]
    kafka: KafkaArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// A line per group, then its partitions that are not OK.
    Text,
    /// The verdicts as JSON.
    Json,
}

/// `GROUP[=STAGE][@TOPIC[+TOPIC…]]` (ingest's `--console-group`; the stage is not needed
/// here): the group and the topics it reads (`topic` when none named).
fn group_topics(spec: &str, topic: &str) -> (String, Vec<String>) {
    let GroupSpec { group, topics, .. } = GroupSpec::parse(spec, topic);
    (group, topics)
}

pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let specs = if args.groups.is_empty() {
        let mut specs = docflow_stack::stages::stage_names();
        specs.push(
            GroupSpec::analytics_rollup(
                docflow_store::analytics::LIVE_GROUP,
                &args.topic,
                &args.processed_topic,
            )
            .to_string(),
        );
        specs
    } else {
        args.groups.clone()
    };
    let groups: Vec<(String, Vec<String>)> =
        specs.iter().map(|s| group_topics(s, &args.topic)).collect();
    let verdicts = match &args.ingest {
        Some(url) => {
            let names: Vec<String> = groups.iter().map(|(g, _)| g.clone()).collect();
            from_ingest(url, args.admin_token.as_deref(), &names).await?
        }
        None => sample(&args, &groups).await?,
    };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&verdicts)?),
        Output::Text => print!("{}", text(&verdicts, args.all)),
    }
    // The rollup is in the default list, but a pipeline may not run one: when nobody asked
    // for it, its NOTFOUND is printed and does not fail the command.
    let optional = |v: &GroupVerdict| {
        args.groups.is_empty()
            && v.group == docflow_store::analytics::LIVE_GROUP
            && v.status == Status::NotFound
    };
    let bad: Vec<String> = verdicts
        .iter()
        .filter(|v| v.status != Status::Ok && !optional(v))
        .map(|v| format!("{} {}", v.group, v.status))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} of {} groups not OK: {}",
            bad.len(),
            verdicts.len(),
            bad.join(", ")
        )
    }
}

/// Samples the groups (each with the topics it reads) from the broker, `--samples` times
/// `--interval` apart.
async fn sample(
    args: &StatusArgs,
    groups: &[(String, Vec<String>)],
) -> anyhow::Result<Vec<GroupVerdict>> {
    let samples = args.samples.max(2);
    let kafka = args.kafka.clone();
    let names = groups.to_vec();
    let clients = std::sync::Arc::new(
        names
            .iter()
            .map(|(g, _)| docflow_replay::broker::client_as(&kafka, g, "docflow-status"))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let mut tracker = Tracker::new(samples);
    for i in 0..samples {
        if i > 0 {
            tokio::time::sleep(args.interval).await;
        }
        let (reading, read_names) = (clients.clone(), names.clone());
        let bootstrap = kafka.bootstrap_servers.clone();
        let reads = tokio::task::spawn_blocking(move || {
            read_names
                .iter()
                .zip(reading.iter())
                .map(|((group, topics), c)| {
                    health::read(c, topics, group).with_context(|| {
                        format!(
                            "reading group {group} on {} from broker {bootstrap} (set by \
                             --kafka-bootstrap-servers or KAFKA_BOOTSTRAP_SERVERS)",
                            topics.join(" and ")
                        )
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await??;
        let at = now_ms();
        for ((group, _), (live, partitions)) in names.iter().zip(reads) {
            tracker.observe(group, at, live, &partitions);
        }
    }
    // Its own samples are the whole window: nothing to warm up.
    let rules = Rules {
        allowed_lag: args.allowed_lag,
        ..Rules::default()
    };
    let now = now_ms();
    Ok(groups
        .iter()
        .map(|(g, _)| tracker.verdict(g, now, rules))
        .collect())
}

/// The verdicts ingest's sampler keeps (`GET /v1/admin/groups`).
async fn from_ingest(
    url: &str,
    token: Option<&str>,
    groups: &[String],
) -> anyhow::Result<Vec<GroupVerdict>> {
    let token = token.context("--ingest needs --admin-token (or DOCFLOW_ADMIN_TOKEN)")?;
    let endpoint = format!("{}/v1/admin/groups", url.trim_end_matches('/'));
    let resp = reqwest::Client::new()
        .get(&endpoint)
        .bearer_auth(token)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .with_context(|| format!("reaching ingest at {endpoint} (--ingest, DOCFLOW_INGEST_URL)"))?;
    let status = resp.status();
    let text = resp.text().await.context("reading ingest's answer")?;
    if !status.is_success() {
        let head: String = text.chars().take(200).collect();
        anyhow::bail!("ingest at {endpoint} answered {status}: {head}");
    }
    let body: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("ingest at {endpoint} answered what is not JSON"))?;
    let watched = body["groups"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for g in groups {
        let entry = watched
            .iter()
            .find(|w| w["group"] == g.as_str())
            .with_context(|| format!("ingest does not watch group {g} (its --console-group)"))?;
        out.push(
            serde_json::from_value(entry["health"].clone()).with_context(|| {
                format!("ingest's verdict of {g} is not one this docflow reads")
            })?,
        );
    }
    Ok(out)
}

/// A line per group, then its partitions (those not OK unless `all`).
fn text(verdicts: &[GroupVerdict], all: bool) -> String {
    let mut out = String::new();
    for v in verdicts {
        out.push_str(&format!(
            "{:<24} {:<8} lag {:<8} {:>3.0} % of windows full  {}\n",
            v.group,
            v.status,
            v.total_lag,
            v.complete * 100.0,
            v.reason
        ));
        // The topic is named when the group reads more than one.
        let several = v
            .partitions
            .iter()
            .any(|p| p.topic != v.partitions[0].topic);
        for p in v
            .partitions
            .iter()
            .filter(|p| all || p.status != Status::Ok)
        {
            let topic = if several {
                format!("{} ", p.topic)
            } else {
                String::new()
            };
            out.push_str(&format!(
                "  {topic}partition {:<4} {:<8} lag {:<8} {}\n",
                p.partition, p.status, p.current_lag, p.reason
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_comes_back_from_its_json() {
        let mut t = Tracker::new(3);
        let o = |committed, log_end| health::Observation {
            topic: "t".to_owned(),
            partition: 0,
            committed: Some(committed),
            log_start: 0,
            log_end,
        };
        t.observe("g", 1000, true, &[o(10, 20)]);
        t.observe("g", 2000, true, &[o(10, 30)]);
        let v = t.verdict("g", 2000, Rules::default());
        assert_eq!(v.partitions[0].status, Status::Stall);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(
            serde_json::from_value::<GroupVerdict>(json).ok(),
            Some(v.clone())
        );
        let printed = text(&[v], false);
        assert!(printed.starts_with("g "), "{printed}");
        assert!(printed.contains("partition 0    STALL"), "{printed}");
    }

    #[test]
    fn groups_name_the_topics_they_read() {
        assert_eq!(
            group_topics("thumbnails", "up"),
            ("thumbnails".to_owned(), vec!["up".to_owned()])
        );
        assert_eq!(
            group_topics("analytics-rollup@doc.uploaded+doc.processed", "up"),
            (
                "analytics-rollup".to_owned(),
                vec!["doc.uploaded".to_owned(), "doc.processed".to_owned()]
            )
        );
        assert_eq!(group_topics("g@", "up").1, ["up"]);
        assert_eq!(group_topics("g@a+a", "up").1, ["a"]);
        assert_eq!(
            group_topics("g=stage@a", "up"),
            ("g".to_owned(), vec!["a".to_owned()])
        );
    }
}
