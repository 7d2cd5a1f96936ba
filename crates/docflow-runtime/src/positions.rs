//! Positions kept outside Kafka: for consumers whose side effects live in a database that
//! also remembers how far they got (the analytics rollup), so the two can never disagree.
//!
//! With a [`PositionStore`] in its [`crate::ConsumerSpec`], a replica:
//! * **on assignment** starts each partition at the position the store holds, or at the
//!   beginning of the partition where it holds none, never at Kafka's committed offset
//!   (which can lag the database, or lead it when the database was restored from a backup or
//!   the group was reset by hand). A store that cannot answer stops the replica with an
//!   error rather than let it consume from a guess;
//! * **as the done watermark advances** (the same contiguous watermark it stores in Kafka)
//!   saves it to the store, in the background, at most one save in flight; on revoke and at
//!   shutdown it saves the final watermark before the partition goes.
//!
//! Saving is an optimisation and a bound, not the guarantee: a consumer that needs exactness
//! must also make each side effect idempotent per record (the rollup records every counted
//! offset in the same transaction as the count), because a watermark saved after the effect
//! can always be one crash behind it.

use std::future::Future;
use std::pin::Pin;

/// A position store failure (a database error, typically).
pub type PositionError = Box<dyn std::error::Error + Send + Sync>;

/// The future a position store returns.
pub type PositionFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, PositionError>> + Send + 'a>>;

/// One partition: topic and partition number.
pub type TopicPartition = (String, i32);

/// Where a consumer group's positions are kept besides Kafka.
pub trait PositionStore: Send + Sync + 'static {
    /// The next offset to read, for each of `partitions` the store holds a position for
    /// (partitions it does not know are left out: they start at their beginning).
    fn load<'a>(
        &'a self,
        group: &'a str,
        partitions: &'a [TopicPartition],
    ) -> PositionFuture<'a, Vec<(TopicPartition, i64)>>;

    /// Every record below `next` of each partition is done (handled or dead-lettered). A
    /// store keeps the highest position it was given.
    fn save<'a>(
        &'a self,
        group: &'a str,
        positions: &'a [(TopicPartition, i64)],
    ) -> PositionFuture<'a, ()>;
}
