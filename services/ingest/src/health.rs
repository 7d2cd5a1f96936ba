//! The console's health sampler: every `--health-interval`, each watched group's committed
//! offsets, log ends and members enter its window (`docflow_replay::health::Tracker`); its
//! verdict is exported as `docflow_consumer_status{group}` and shown by
//! `GET /v1/admin/groups`; its lag is kept for the console's charts
//! (`GET /v1/admin/groups/{group}/history`).

use std::sync::Arc;

use docflow_replay::health::{GroupVerdict, Observation};
use docflow_runtime::metrics::now_ms;

use crate::AppState;
use crate::console::GroupBroker;

/// Samples every watched group until ingest stops.
pub(crate) async fn sample(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(state.console.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Groups whose last read failed: the first failure is a warning, the rest debug.
    let mut failing = std::collections::HashSet::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = state.stopping.cancelled() => return,
        }
        for w in &state.console.groups {
            let app = state.clone();
            let group = w.group.clone();
            let read = tokio::task::spawn_blocking(move || app.console.group(&group)).await;
            match read {
                Ok(Ok(broker)) => {
                    let at = now_ms();
                    observe(&state, &w.group, at, &broker);
                    state.console.keep_lag(&w.group, at, &broker);
                    failing.remove(&w.group);
                }
                Ok(Err(e)) if failing.insert(w.group.clone()) => {
                    tracing::warn!(group = %w.group, error = %e, "health: the group cannot be read; its last commits age in its window");
                }
                Ok(Err(e)) => {
                    tracing::debug!(group = %w.group, error = %e, "health: the group still cannot be read");
                }
                Err(e) => tracing::warn!(group = %w.group, error = %e, "health: sampling failed"),
            }
            // Also when the read failed: the window ages (a broker that cannot be read
            // makes no commits seen), and the metric says what the console says.
            let verdict = state.console.verdict(&w.group, now_ms());
            state.metrics.set_consumer_status(&w.group, verdict.status);
        }
    }
}

/// Adds one read of `group` to its window.
pub(crate) fn observe(state: &AppState, group: &str, at_ms: i64, broker: &GroupBroker) {
    let partitions: Vec<Observation> = broker
        .partitions
        .iter()
        .map(|p| Observation {
            topic: p.topic.clone(),
            partition: p.partition,
            committed: p.committed,
            log_start: p.log_start,
            log_end: p.log_end,
        })
        .collect();
    let mut tracker = state
        .console
        .health
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    tracker.observe(group, at_ms, !broker.members.is_empty(), &partitions);
}

impl crate::console::Console {
    /// The verdict of `group` at `now_ms` from its window so far.
    pub(crate) fn verdict(&self, group: &str, now_ms: i64) -> GroupVerdict {
        self.health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .verdict(group, now_ms, self.rules)
    }
}
