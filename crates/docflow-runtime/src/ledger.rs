//! Crash-counting dead letters: defence in depth against a record that takes its whole
//! process down (a native library allocating until the OOM killer comes, an abort).
//!
//! Retries and dead letters only work while the process lives. A record that kills it is
//! delivered again after the restart, kills it again, and the partition stalls forever with
//! nothing in the DLQ. So each delivery is recorded durably *before* the handler runs
//! ([`DeliveryLedger::claim`]) and forgotten once it has an outcome
//! ([`DeliveryLedger::release`]); a claim that was never released means the process died
//! with the record in hand.
//!
//! A death convicts no one by itself: a process killed from outside (a node lost, a spot
//! reclaim, `kill -9`) dies with every record it held, all innocent. The records a dead
//! process held become *suspects*; a suspect runs **alone** (it waits for every other
//! record of the replica to finish, and none starts until it is done), and only a death
//! while it runs alone counts: of a process that died of its own fault — its supervisor saw
//! a signal or a panic's exit status ([`crate::supervise`]) — or, seen by nobody,
//! [`UNSEEN_FACTOR`] times as many. On the delivery after `--max-crash-deliveries` such
//! deaths, the runtime dead-letters the record (class [`CRASH_LOOP`]) without running the
//! handler, naming the deaths; a suspect that finishes alone is cleared.

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

/// What a claim found about the record's earlier deliveries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claimed {
    /// Deliveries since the record last finished, this one included.
    pub deliveries: u32,
    /// Deaths with the record in hand, of any kind: a record with one is a suspect.
    pub deaths: u32,
    /// Deaths while it ran alone, of a process that died of its own fault (its cause of
    /// death recorded).
    pub convicting: u32,
    /// Deaths while it ran alone, of any cause, seen or not.
    pub alone: u32,
}

/// Deaths alone that nobody saw convict at this many times `--max-crash-deliveries`: a
/// record that takes its whole container down (a container OOM kill ends the supervisor
/// too) is still dead-lettered, while outside kills landing again and again on the same
/// record running alone are improbable.
pub const UNSEEN_FACTOR: u32 = 2;

/// One death found with a record in hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// The process life that died.
    pub life: String,
    /// Whether the record ran alone in it.
    pub alone: bool,
    /// Records that life was found holding (this one included).
    pub in_hand: u32,
    /// How the life ended, as its supervisor saw it; `None`: nobody saw (killed from
    /// outside with its supervisor, a lost node).
    pub cause: Option<String>,
    /// When the death was found (ms since the epoch).
    pub found_at_ms: i64,
}

/// Where deliveries are counted: durable storage shared by every replica of the group (the
/// result store's `deliveries` table for docflow's stages).
pub trait DeliveryLedger: Send + Sync + 'static {
    /// Records one more delivery of `key` by process life `life` and says what it found: a
    /// delivery still in hand from an earlier claim by another life is a death.
    fn claim<'a>(&'a self, key: &'a DeliveryKey, life: &'a str) -> LedgerFuture<'a, Claimed>;

    /// The delivery of `key` that `life` holds runs alone now (`alone`), or no longer.
    fn set_alone<'a>(
        &'a self,
        key: &'a DeliveryKey,
        life: &'a str,
        alone: bool,
    ) -> LedgerFuture<'a, ()>;

    /// The delivery of `key` that `life` holds ended inside a live process: `finished`
    /// (handled or dead-lettered) forgets the record; otherwise (abandoned at shutdown or
    /// revoke) it is no longer in hand, and a suspect stays one.
    fn release<'a>(
        &'a self,
        key: &'a DeliveryKey,
        life: &'a str,
        finished: bool,
    ) -> LedgerFuture<'a, ()>;

    /// Records how process life `life` ended, as its supervisor saw it (a signal or exit
    /// status and its last words): it died of its own fault.
    fn record_death<'a>(&'a self, life: &'a str, cause: &'a str) -> LedgerFuture<'a, ()>;

    /// The deaths found with `key` in hand since it last finished, oldest first.
    fn deaths<'a>(&'a self, key: &'a DeliveryKey) -> LedgerFuture<'a, Vec<Death>>;
}
