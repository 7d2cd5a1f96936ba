//! The group's measured rate, from its replicas' `/metrics`: records finished (handled or
//! dead-lettered, `docflow_consumer_messages_total{group, outcome}`) over a sample window,
//! summed over the replicas given.

use std::time::Duration;

use crate::ReplayError;

/// Outcomes that finish a record.
const FINISHED: [&str; 2] = ["ok", "dead_lettered"];

/// Records `group` has finished so far according to one `/metrics` text.
pub fn finished(metrics: &str, group: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("docflow_consumer_messages_total{"))
        .filter_map(|rest| {
            let (labels, value) = rest.split_once('}')?;
            let label = |name: &str| {
                labels.split(',').find_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
                })
            };
            let ours = label("group").as_deref() == Some(group)
                && label("outcome").is_some_and(|o| FINISHED.contains(&o.as_str()));
            ours.then(|| value.trim().parse::<f64>().ok()).flatten()
        })
        .sum()
}

async fn total(http: &reqwest::Client, urls: &[String], group: &str) -> Result<f64, ReplayError> {
    let mut sum = 0.0;
    for url in urls {
        let text = http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| ReplayError::Metrics(format!("{url}: {e}")))?
            .text()
            .await
            .map_err(|e| ReplayError::Metrics(format!("{url}: {e}")))?;
        sum += finished(&text, group);
    }
    Ok(sum)
}

/// Records/s `group` finished across `urls` over `sample`.
pub async fn measure(urls: &[String], group: &str, sample: Duration) -> Result<f64, ReplayError> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| ReplayError::Metrics(e.to_string()))?;
    let before = total(&http, urls, group).await?;
    tokio::time::sleep(sample).await;
    let after = total(&http, urls, group).await?;
    Ok((after - before).max(0.0) / sample.as_secs_f64().max(1e-3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_groups_finished_records_only() {
        let text = r#"# HELP docflow_consumer_messages_total Records by outcome
# TYPE docflow_consumer_messages_total counter
docflow_consumer_messages_total{group="thumbnails",outcome="ok"} 120
docflow_consumer_messages_total{group="thumbnails",outcome="dead_lettered"} 3
docflow_consumer_messages_total{group="thumbnails",outcome="retried"} 40
docflow_consumer_messages_total{outcome="ok",group="other"} 999
"#;
        assert_eq!(finished(text, "thumbnails"), 123.0);
        assert_eq!(finished(text, "other"), 999.0);
        assert_eq!(finished(text, "none"), 0.0);
    }
}
