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
    /// The group's entry of the admin overview.
    async fn overview(&self) -> Value {
        let body: Value = self
            .http
            .get(format!("{}/v1/admin/groups", self.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == self.group.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("no group {} in {body}", self.group))
    }

    /// Polls the overview until `done` holds of the group's entry; returns it.
    async fn until(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let g = self.overview().await;
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
