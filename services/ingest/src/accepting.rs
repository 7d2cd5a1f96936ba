//! Jobs being marked `accepted` after their event's ack, off the request's path.
//!
//! An upload's job is recorded (`stored`) while its `doc.uploaded` is produced; once the
//! broker acks, the job must say `accepted`. That write is the second database write of an
//! upload and no part of what the `202` promises (the bytes are durable and the event is in
//! the log), so the answer does not wait for it. What reads the job waits instead:
//! [`Accepting::settled`] returns once the mark of that job, if one is in flight on this
//! replica, has been written, so a client that reads its job after the `202` from the
//! replica that answered sees `accepted`. Another replica may read `stored` for the few
//! milliseconds the mark takes (and a duplicate upload there produces the event again, which
//! the stages absorb).
//!
//! A mark that cannot be written (the database went away just after the ack) is retried for
//! a while; if it still fails the job stays `stored`. Nothing is lost: the event is in the
//! log, the stages process it, and the job's page counts it as processing once a stage has
//! reported; an upload of the same bytes produces it again (a duplicate the stages absorb).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use docflow_store::Jobs;
use docflow_store::jobs::status;
use tokio::sync::watch;

use crate::metrics::{AcceptOutcome, IngestMetrics};

/// How often a failed mark is tried again, and the pause before each retry.
const RETRIES: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(200),
    Duration::from_secs(1),
    Duration::from_secs(3),
];

/// Longest a read of a job waits for its mark.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// The marks in flight, by (tenant, job).
#[derive(Debug, Default)]
pub(crate) struct Accepting {
    in_flight: Mutex<HashMap<(String, String), watch::Receiver<()>>>,
}

impl Accepting {
    /// Marks the job `id` of `tenant` accepted (event acked at `produced_at_ms`) on a task of
    /// its own; reads of that job wait for it ([`Accepting::settled`]).
    pub(crate) fn mark(
        self: &Arc<Self>,
        jobs: Jobs,
        metrics: IngestMetrics,
        tenant: String,
        id: String,
        produced_at_ms: i64,
    ) {
        let (done, rx) = watch::channel(());
        let key = (tenant, id);
        if let Ok(mut m) = self.in_flight.lock() {
            m.insert(key.clone(), rx);
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let (tenant, id) = &key;
            let mut tries = RETRIES.iter();
            let outcome = loop {
                match jobs
                    .set_status(tenant, id, status::ACCEPTED, Some(produced_at_ms))
                    .await
                {
                    Ok(()) => break AcceptOutcome::Ok,
                    Err(e) => match tries.next() {
                        Some(pause) => {
                            tracing::debug!(%tenant, job = %id, error = %e, "marking the job accepted failed; retrying");
                            tokio::time::sleep(*pause).await;
                        }
                        None => {
                            tracing::error!(%tenant, job = %id, error = %e,
                                "the job's event is in the log but the job could not be marked accepted; it stays `stored`");
                            break AcceptOutcome::Error;
                        }
                    },
                }
            };
            metrics.accept_mark(outcome);
            if let Ok(mut m) = this.in_flight.lock()
                && m.get(&key)
                    .is_some_and(|rx| rx.same_channel(&done.subscribe()))
            {
                m.remove(&key);
            }
            // Dropping `done` wakes every reader waiting in `settled`.
            drop(done);
        });
    }

    /// Returns once no mark of the job `id` of `tenant` is in flight, or after
    /// [`SETTLE_LIMIT`] (a database that stalls the mark must not stall every read of the
    /// job: the read then goes ahead and may see `stored`).
    pub(crate) async fn settled(&self, tenant: &str, id: &str) {
        let rx = self
            .in_flight
            .lock()
            .ok()
            .and_then(|m| m.get(&(tenant.to_owned(), id.to_owned())).cloned());
        if let Some(mut rx) = rx {
            // Nothing is ever sent: this returns when the sender is dropped.
            let closed = async { while rx.changed().await.is_ok() {} };
            let _ = tokio::time::timeout(SETTLE_LIMIT, closed).await;
        }
    }

    /// Waits at most `limit` for every mark in flight (shutdown); says how many were left.
    pub(crate) async fn drain(&self, limit: Duration) -> usize {
        let all: Vec<watch::Receiver<()>> = self
            .in_flight
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let wait = async {
            for mut rx in all {
                while rx.changed().await.is_ok() {}
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
        self.in_flight.lock().map_or(0, |m| m.len())
    }
}
