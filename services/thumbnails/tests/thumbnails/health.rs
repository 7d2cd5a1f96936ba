//! The console's health verdict (Burrow's evaluation over sampled offsets) against the real
//! broker: a group consuming is OK (a partition it never committed counts from its log
//! start); its stage stopped with records waiting is ERR with
//! stopped partitions; its offsets reset back is REWIND; the stage back is OK again — in
//! `GET /v1/admin/groups` and as `docflow_consumer_status`.

use std::time::Duration;

use docflow_events::stages::THUMBNAILS;
use docflow_stack::pdf::text_pdf;
use reqwest::StatusCode;
use serde_json::Value;

use super::Stack;

const ADMIN: &str = "tok-operator";

fn pdf(n: usize) -> Vec<u8> {
    let line = format!("health test document {n}");
    text_pdf(&[&[line.as_str()]])
}

impl Stack {
    /// The admin API's answer to GET `path` (under `/v1/admin`), as JSON.
    async fn admin_get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}/v1/admin{path}", self.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// POST `path` (under `/v1/admin`) with the admin token and `body` as JSON, if any.
    async fn admin_post(&self, path: String, body: Option<Value>) -> reqwest::Response {
        let req = self
            .http
            .post(format!("{}/v1/admin{path}", self.base))
            .bearer_auth(ADMIN);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        req.send().await.unwrap()
    }

    /// Group `group`'s entry of the admin overview.
    async fn overview_of(&self, group: &str) -> Value {
        let body = self.admin_get("/groups").await;
        body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == group)
            .cloned()
            .unwrap_or_else(|| panic!("no group {group} in {body}"))
    }

    /// Polls the overview until `done` holds of the group's entry; returns it.
    async fn until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.until_of(&self.group, what, done).await
    }

    /// Polls the overview until `done` holds of group `group`'s entry; returns it.
    async fn until_of(&self, group: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let g = self.overview_of(group).await;
            if done(&g) {
                return g;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: {}",
                g["health"]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `docflow_consumer_status{group=...}` on ingest's /metrics reads `want`
    /// (it is set at each sample, so it may trail the overview by one).
    async fn status_metric(&self, want: f64) {
        let series = format!("docflow_consumer_status{{group=\"{}\"}} ", self.group);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.get("/metrics").await.text().await.unwrap();
            let got: Option<f64> = text
                .lines()
                .find_map(|l| l.strip_prefix(&series))
                .and_then(|v| v.trim().parse().ok());
            if got == Some(want) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "docflow_consumer_status reads {got:?}, not {want}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn partitions_with(g: &Value, status: &str) -> Vec<i64> {
    g["health"]["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"] == status)
        .filter_map(|p| p["partition"].as_i64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verdict_follows_a_stage_that_stops_rewinds_and_comes_back() {
    let mut s = Stack::start_without_stage_with(|c| {
        c.admin_tokens = vec![ADMIN.to_owned()];
        c.health.health_interval = Duration::from_millis(250);
        c.health.health_window = 6;
    })
    .await;
    s.stack.start_named("thumbnails").await.unwrap();

    // Consuming: OK, the window filling with commits.
    let (status, job) = s.post("?wait=30s", pdf(0)).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    let g = s
        .until("OK, the committed partition's window full", |g| {
            g["health"]["status"] == "OK"
                && g["health"]["partitions"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["complete"] == 1.0))
        })
        .await;
    assert_eq!(g["health"]["reason"], "every partition OK, no lag", "{g}");
    s.status_metric(1.0).await;

    // The stage stops and records wait: its commits stop; once the last is older than the
    // window spans, the partitions with records waiting are STOP and the group ERR.
    assert!(s.stack.signal_shutdown(THUMBNAILS));
    s.until("the group without members", |g| {
        g["broker"]["members"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    for n in 1..=6 {
        let (status, job) = s.post("", pdf(n)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    }
    let g = s
        .until("ERR with stopped partitions", |g| {
            g["health"]["status"] == "ERR" && !partitions_with(g, "STOP").is_empty()
        })
        .await;
    let reason = g["health"]["reason"].as_str().unwrap();
    assert!(reason.contains("STOP: no commit for"), "{reason}");
    assert!(g["health"]["total_lag"].as_u64().unwrap() >= 6, "{g}");
    s.status_metric(3.0).await;

    // Its offsets reset back on a partition that had committed records: REWIND.
    let committed: Vec<(i32, i64)> = g["broker"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["partition"].as_i64()? as i32, p["committed"].as_i64()?)))
        .filter(|&(_, c)| c > 0)
        .collect();
    let &(partition, _) = committed.first().expect("a partition with commits");
    let c = docflow_replay::broker::client_as(&s.stack.kafka(), &s.group, "health-test").unwrap();
    docflow_replay::broker::commit(&c, &s.uploaded, &[(partition, 0)]).unwrap();
    let g = s
        .until("the reset partition REWIND", |g| {
            partitions_with(g, "REWIND").contains(&i64::from(partition))
        })
        .await;
    assert_eq!(g["health"]["status"], "ERR", "{g}");

    // The stage comes back: it reads again from the reset offset, catches up: OK.
    s.stack.start_named("thumbnails").await.unwrap();
    // OK comes while it still reads back (a lag that was within 0 in the window): wait for
    // the catch-up too, then it must still be OK.
    let g = s
        .until("OK again and caught up", |g| {
            g["health"]["status"] == "OK" && g["health"]["total_lag"] == 0
        })
        .await;
    assert_eq!(g["health"]["status"], "OK", "{g}");
    s.status_metric(1.0).await;
    s.finish().await;
}

/// Lag in records of `g`'s partitions of `topic`, summed.
fn lag_on(g: &Value, topic: &str) -> i64 {
    g["broker"]["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["topic"] == topic)
        .filter_map(|p| p["lag_records"].as_i64())
        .sum()
}

/// The analytics rollup reads uploads and results: the console shows its lag, verdict and
/// history on both topics, and a rollup that stops is seen behind on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollup_is_watched_on_uploads_and_results() {
    let mut s = Stack::start_without_stage_with(|c| {
        c.admin_tokens = vec![ADMIN.to_owned()];
        c.health.health_interval = Duration::from_millis(250);
        c.health.health_window = 4;
    })
    .await;
    s.stack.start_named("thumbnails").await.unwrap();
    s.stack.start_analytics().await.unwrap();
    let rollup = s.stack.group(docflow_store::analytics::LIVE_GROUP);
    let (uploaded, processed) = (s.uploaded.clone(), s.processed.clone());

    let (status, job) = s.post("?wait=30s", pdf(0)).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    let g = s
        .until_of(&rollup, "the rollup caught up on both topics", |g| {
            g["health"]["status"] == "OK"
                && g["broker"]["lag_records"] == 0
                && g["broker"]["partitions"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["committed"].as_i64() > Some(0)))
                && lag_on(g, &uploaded) == 0
                && lag_on(g, &processed) == 0
                && g["health"]["partitions"].as_array().is_some_and(|ps| {
                    ps.iter().any(|p| p["topic"] == uploaded.as_str())
                        && ps.iter().any(|p| p["topic"] == processed.as_str())
                })
        })
        .await;
    assert_eq!(g["topics"], serde_json::json!([uploaded, processed]), "{g}");
    assert_eq!(g["stage"], docflow_store::analytics::LIVE_GROUP, "{g}");
    // Three partitions of each topic, each under its topic.
    let seen: std::collections::BTreeSet<(String, i64)> = g["broker"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["topic"].as_str().unwrap().to_owned(),
                p["partition"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen.len(), 6, "{g}");
    // Its history keys each partition by topic.
    let history = s.admin_get(&format!("/groups/{rollup}/history")).await;
    let keys: Vec<String> = history["points"]
        .as_array()
        .and_then(|p| p.last())
        .and_then(|p| p["parts"].as_object())
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert!(keys.contains(&format!("{uploaded}/0")), "{history}");
    assert!(keys.contains(&format!("{processed}/0")), "{history}");

    // A value that is no event on each topic: the rollup dead-letters each to that topic's
    // DLQ, both at partition 0 offset 0 (a DLQ has one partition).
    let producer: rdkafka::producer::FutureProducer =
        s.kafka().client_config("junk").create().unwrap();
    for topic in [&uploaded, &processed] {
        producer
            .send(
                rdkafka::producer::FutureRecord::to(topic)
                    .partition(0)
                    .key("junk")
                    .payload("not an event"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    let g = s
        .until_of(&rollup, "a dead letter in each DLQ", |g| {
            g["broker"]["dlq_records"] == 2 && g["dlq_waiting"] == 2
        })
        .await;
    let dlqs = [
        docflow_events::topics::dead_letter(&uploaded, &rollup),
        docflow_events::topics::dead_letter(&processed, &rollup),
    ];
    assert_eq!(g["broker"]["dlq_topics"], serde_json::json!(dlqs), "{g}");
    let letters = s.admin_get(&format!("/groups/{rollup}/dead-letters")).await;
    let mut from: Vec<(String, String)> = letters["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["topic"].as_str().unwrap().to_owned(),
                d["original"]["topic"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    from.sort();
    let mut want = vec![
        (dlqs[0].clone(), uploaded.clone()),
        (dlqs[1].clone(), processed.clone()),
    ];
    want.sort();
    assert_eq!(from, want, "{letters}");
    // Partition 0 offset 0 is in both DLQs: a discard must say which.
    let discard = |query: String| {
        s.admin_post(
            format!("/groups/{rollup}/dead-letters/0/0/discard{query}"),
            Some(serde_json::json!({"by": "tester"})),
        )
    };
    let r = discard(String::new()).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let body: Value = r.json().await.unwrap();
    assert!(body.to_string().contains("?topic="), "{body}");
    let r = discard("?topic=elsewhere".to_owned()).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = discard(format!("?topic={}", dlqs[0])).await;
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (&body["discarded"], &body["topic"]),
        (&serde_json::json!(true), &serde_json::json!(dlqs[0])),
        "{body}"
    );
    // The redrive runs over both DLQs: the discarded one stays, the other goes back.
    let report: Value = s
        .admin_post(format!("/groups/{rollup}/dead-letters/redrive"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            &report["read"],
            &report["redriven"],
            &report["already_redriven"]
        ),
        (
            &serde_json::json!(2),
            &serde_json::json!(1),
            &serde_json::json!(1)
        ),
        "{report}"
    );
    // The value sent back fails again (a third dead letter); then nothing waits.
    s.until_of(&rollup, "the redriven record dead-lettered again", |g| {
        g["broker"]["dlq_records"] == 3 && g["broker"]["lag_records"] == 0
    })
    .await;

    // The rollup stops; two more documents go through the stage: two records wait on each
    // topic, and its verdict names the topic of a partition that stopped.
    assert!(
        s.stack
            .signal_shutdown(docflow_store::analytics::LIVE_GROUP)
    );
    s.until_of(&rollup, "the rollup without members", |g| {
        g["broker"]["members"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    for n in 1..=2 {
        let (status, job) = s.post("?wait=30s", pdf(n)).await;
        assert_eq!(status, StatusCode::OK, "{job}");
    }
    let g = s
        .until_of(&rollup, "two records behind on each topic, STOP", |g| {
            lag_on(g, &uploaded) == 2
                && lag_on(g, &processed) == 2
                && g["health"]["status"] == "ERR"
        })
        .await;
    let reason = g["health"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!("{uploaded} partition"))
            || reason.starts_with(&format!("{processed} partition")),
        "{reason}"
    );
    assert_eq!(g["health"]["total_lag"], 4, "{g}");
    s.finish().await;
}
