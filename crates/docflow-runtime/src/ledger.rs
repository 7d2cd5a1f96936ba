//! Crash-counting dead letters: defence in depth against a record that takes its whole
//! process down (a native library allocating until the OOM killer comes, an abort).
//!
//! Retries and dead letters only work while the process lives. A record that kills it is
//! delivered again after the restart, kills it again, and the partition stalls forever with
//! nothing in the DLQ. So each delivery is recorded durably *before* the handler runs
//! ([`DeliveryLedger::claim`]) and forgotten once it has an outcome
//! ([`DeliveryLedger::release`]); a claim that was never released means the process died
//! with the record in hand. On the delivery after `--max-crash-deliveries` such deaths, the
//! runtime dead-letters the record (class [`CRASH_LOOP`]) without running the handler, and
//! the partition moves on.

use std::future::Future;
use std::pin::Pin;

/// The DLQ error class of a record dead-lettered for taking its process down.
pub const CRASH_LOOP: &str = "crash_loop";

/// One record of one consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryKey {
    /// Consumer group.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
}

/// A ledger failure (a database error, typically); the runtime retries it like a transient
/// handler error.
pub type LedgerError = Box<dyn std::error::Error + Send + Sync>;

/// The future a ledger returns.
pub type LedgerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LedgerError>> + Send + 'a>>;

/// Where deliveries are counted: durable storage shared by every replica of the group (the
/// result store's `deliveries` table for docflow's stages).
pub trait DeliveryLedger: Send + Sync + 'static {
    /// Records one more delivery of `key` and returns how many deliveries that makes,
    /// counting those never released (1 on a first delivery).
    fn claim<'a>(&'a self, key: &'a DeliveryKey) -> LedgerFuture<'a, u32>;

    /// The delivery of `key` ended inside a live process: `finished` (handled or
    /// dead-lettered) forgets the record; otherwise (abandoned at shutdown or revoke) only
    /// this delivery is uncounted, as it did not crash anything.
    fn release<'a>(&'a self, key: &'a DeliveryKey, finished: bool) -> LedgerFuture<'a, ()>;
}
