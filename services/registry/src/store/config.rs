//! Compatibility: the levels configured globally and per subject, and checks of a schema
//! against a subject's versions.

use apache_avro::Schema;
use docflow_events::{CompatibilityLevel, check_versions};
use sqlx::Any;

use super::subjects::versions_in;
use super::{CandidateSchema, Store, VersionRef};
use crate::error::RegistryError;

const GLOBAL: &str = "";

impl Store {
    /// Checks `schema` against one version, or (with `None`) against the versions the
    /// subject's level names. `Ok(vec![])` means compatible.
    pub async fn check(
        &self,
        subject: &str,
        against: Option<VersionRef>,
        schema: &CandidateSchema,
    ) -> Result<Vec<String>, RegistryError> {
        let level = self.level_in(&self.pool, subject).await?;
        let history = match against {
            // Confluent: nothing to be incompatible with (the gate CI runs before the first
            // registration of a subject).
            Some(VersionRef::Latest) => versions_in(&self.pool, subject, false)
                .await?
                .pop()
                .into_iter()
                .collect(),
            Some(VersionRef::Number(n)) => {
                let all = versions_in(&self.pool, subject, false).await?;
                vec![all.into_iter().find(|v| v.version == n).ok_or(
                    RegistryError::VersionNotFound {
                        version: n.to_string(),
                    },
                )?]
            }
            None => versions_in(&self.pool, subject, false).await?,
        };
        let parsed = self.parse_versions(&history).await?;
        let numbered: Vec<(i64, &Schema)> = parsed.iter().map(|(n, s)| (*n, s)).collect();
        // A check against one version compares with it alone, whatever the level's reach.
        let level = match (against, level) {
            (Some(_), CompatibilityLevel::BackwardTransitive) => CompatibilityLevel::Backward,
            (Some(_), CompatibilityLevel::ForwardTransitive) => CompatibilityLevel::Forward,
            (Some(_), CompatibilityLevel::FullTransitive) => CompatibilityLevel::Full,
            (_, level) => level,
        };
        Ok(check_versions(level, &numbered, &schema.parsed)
            .err()
            .unwrap_or_default())
    }

    /// The level that applies to `subject` (`None`: the global level).
    pub async fn level(&self, subject: Option<&str>) -> Result<CompatibilityLevel, RegistryError> {
        match subject {
            Some(s) => self.level_in(&self.pool, s).await,
            None => Ok(self
                .configured(&self.pool, GLOBAL)
                .await?
                .unwrap_or(self.default_level)),
        }
    }

    /// The level configured for exactly this subject, if any.
    pub async fn subject_level(
        &self,
        subject: &str,
    ) -> Result<Option<CompatibilityLevel>, RegistryError> {
        self.configured(&self.pool, subject).await
    }

    /// Sets the level of `subject`, or the global level.
    pub async fn set_level(
        &self,
        subject: Option<&str>,
        level: CompatibilityLevel,
    ) -> Result<(), RegistryError> {
        let _guard = self.write.lock().await;
        let scope = subject.unwrap_or(GLOBAL);
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM sr_config WHERE scope = $1")
            .bind(scope)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO sr_config (scope, compatibility) VALUES ($1, $2)")
            .bind(scope)
            .bind(level.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes the level of `subject` (or the global one), returning what it was.
    pub async fn clear_level(
        &self,
        subject: Option<&str>,
    ) -> Result<Option<CompatibilityLevel>, RegistryError> {
        let _guard = self.write.lock().await;
        let scope = subject.unwrap_or(GLOBAL);
        let before = self.configured(&self.pool, scope).await?;
        sqlx::query("DELETE FROM sr_config WHERE scope = $1")
            .bind(scope)
            .execute(&self.pool)
            .await?;
        Ok(before)
    }

    pub(super) async fn level_in<'e, E>(
        &self,
        ex: E,
        subject: &str,
    ) -> Result<CompatibilityLevel, RegistryError>
    where
        E: sqlx::Executor<'e, Database = Any> + Copy,
    {
        if let Some(l) = self.configured(ex, subject).await? {
            return Ok(l);
        }
        Ok(self
            .configured(ex, GLOBAL)
            .await?
            .unwrap_or(self.default_level))
    }

    async fn configured<'e, E>(
        &self,
        ex: E,
        scope: &str,
    ) -> Result<Option<CompatibilityLevel>, RegistryError>
    where
        E: sqlx::Executor<'e, Database = Any>,
    {
        let v: Option<String> =
            sqlx::query_scalar("SELECT compatibility FROM sr_config WHERE scope = $1")
                .bind(scope)
                .fetch_optional(ex)
                .await?;
        v.map(|s| {
            s.parse()
                .map_err(|_| RegistryError::InvalidCompatibilityLevel(s.clone()))
        })
        .transpose()
    }
}
