//! The registry's state in SQL: schemas by id, subject versions, compatibility config.
//!
//! Guarantees:
//! * the same schema gets the same id in every subject, "the same" as Confluent decides
//!   it: by its canonical string (`AvroSchema.canonicalString`, see `canonical`), or its
//!   normalized form with `?normalize=true`;
//! * re-registering a schema a subject already has — or one equivalent to it (properties
//!   or aliases in another order, `error` for `record`) — returns the existing id, no new
//!   version;
//! * versions only increase, also after soft or permanent deletes;
//! * schema rows are never deleted, so ids of soft-deleted versions still resolve.
//!
//! Writes run in one transaction each, serialised by a process-wide lock; ids and versions
//! are also guarded by primary keys, and a write that loses a race with another replica is
//! retried.

use std::collections::HashMap;

use apache_avro::Schema;
use docflow_events::CompatibilityLevel;
use sqlx::AnyPool;
use tokio::sync::Mutex;

use crate::error::RegistryError;
use crate::references::SchemaReference;

mod canonical;
mod config;
mod schemas;
mod subjects;

pub use schemas::CandidateSchema;

/// The only schema type this registry stores.
pub const AVRO: &str = "AVRO";

/// A schema as registered under a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    /// Subject.
    pub subject: String,
    /// Version within the subject.
    pub version: i64,
    /// Global schema id.
    pub id: i64,
    /// Schema text as first registered.
    pub schema: String,
    /// Soft-deleted.
    pub deleted: bool,
    /// Named types the schema takes from other subjects.
    pub references: Vec<SchemaReference>,
}

/// Which version a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRef {
    /// The newest (not deleted) version.
    Latest,
    /// A specific version.
    Number(i64),
}

impl VersionRef {
    /// Parses Confluent's version path segment: `latest`, `-1`, or 1..=2^31-1.
    pub fn parse(s: &str) -> Result<Self, RegistryError> {
        if s.eq_ignore_ascii_case("latest") || s == "-1" {
            return Ok(VersionRef::Latest);
        }
        match s.parse::<i64>() {
            Ok(n) if (1..=i64::from(i32::MAX)).contains(&n) => Ok(VersionRef::Number(n)),
            _ => Err(RegistryError::InvalidVersion(s.to_owned())),
        }
    }
}

/// Registry state over a SQL pool.
#[derive(Debug)]
pub struct Store {
    pool: AnyPool,
    write: Mutex<()>,
    default_level: CompatibilityLevel,
    /// Stored schemas parsed with their references resolved, by id.
    parsed: std::sync::Mutex<HashMap<i64, Schema>>,
    /// Stored schemas' equivalence fingerprints, by id.
    equivalence: std::sync::Mutex<HashMap<i64, String>>,
}

/// `deleted` for [`Store::referenced`]: only live versions.
const LIVE: bool = false;

impl Store {
    /// Runs migrations and wraps the pool. `default_level` applies until `PUT /config`.
    pub async fn open(
        pool: AnyPool,
        default_level: CompatibilityLevel,
    ) -> Result<Self, RegistryError> {
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| RegistryError::Store(e.into()))?;
        let store = Store {
            pool,
            write: Mutex::new(()),
            default_level,
            parsed: std::sync::Mutex::new(HashMap::new()),
            equivalence: std::sync::Mutex::new(HashMap::new()),
        };
        let recomputed = {
            let _guard = store.write.lock().await;
            store.refingerprint().await?
        };
        if recomputed > 0 {
            tracing::info!(
                recomputed,
                "schema fingerprints recomputed as Confluent's canonical string"
            );
        }
        Ok(store)
    }

    /// The pool (tests close it to simulate an outage).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }
}
