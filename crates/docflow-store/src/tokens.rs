//! API tokens in the database: `docflow tokens create|list|revoke` writes them, the ingest
//! API accepts them next to the tokens of its configuration. Only SHA-256 digests are stored;
//! a token is shown once, when created. Revocation takes effect on the next request.

use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use sqlx::{AnyPool, Row};

use crate::StoreError;

/// Prefix of generated tokens (easy to spot in logs and secret scanners).
pub const TOKEN_PREFIX: &str = "dft_";

/// One stored token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// First 12 hex characters of the digest: identifies the token in lists and revocation.
    pub id: String,
    /// Tenant the token acts as.
    pub tenant_id: String,
    /// Free text given at creation.
    pub label: Option<String>,
    /// Creation, Unix ms.
    pub created_at_ms: i64,
    /// Revocation, Unix ms.
    pub revoked_at_ms: Option<i64>,
}

/// Token storage over the docflow database.
#[derive(Debug, Clone)]
pub struct Tokens {
    pool: AnyPool,
}

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Tokens {
    /// Wraps a pool on a migrated docflow database ([`crate::open`]).
    pub fn new(pool: AnyPool) -> Self {
        Tokens { pool }
    }

    /// Creates a token for `tenant` and returns it: the only time it is visible.
    pub async fn create(
        &self,
        tenant: &str,
        label: Option<&str>,
    ) -> Result<(String, TokenInfo), StoreError> {
        let secret = format!(
            "{TOKEN_PREFIX}{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let d = digest(&secret);
        let created = now_ms();
        sqlx::query(
            "INSERT INTO api_tokens (token_sha256, tenant_id, label, created_at_ms) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(&d)
        .bind(tenant)
        .bind(label)
        .bind(created)
        .execute(&self.pool)
        .await?;
        let info = TokenInfo {
            id: d[..12].to_owned(),
            tenant_id: tenant.to_owned(),
            label: label.map(str::to_owned),
            created_at_ms: created,
            revoked_at_ms: None,
        };
        Ok((secret, info))
    }

    /// The tenant of a valid (known, not revoked) token.
    pub async fn tenant_of(&self, token: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "SELECT tenant_id FROM api_tokens WHERE token_sha256 = $1 AND revoked_at_ms IS NULL",
        )
        .bind(digest(token))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    /// Every token, newest first (of one tenant when given).
    pub async fn list(&self, tenant: Option<&str>) -> Result<Vec<TokenInfo>, StoreError> {
        let rows = sqlx::query(
            "SELECT token_sha256, tenant_id, label, created_at_ms, revoked_at_ms FROM api_tokens \
             WHERE ($1 = '' OR tenant_id = $1) ORDER BY created_at_ms DESC, token_sha256",
        )
        .bind(tenant.unwrap_or(""))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let d: String = r.try_get(0)?;
                Ok(TokenInfo {
                    id: d.get(..12).unwrap_or(&d).to_owned(),
                    tenant_id: r.try_get(1)?,
                    label: r.try_get(2)?,
                    created_at_ms: r.try_get(3)?,
                    revoked_at_ms: r.try_get(4)?,
                })
            })
            .collect()
    }

    /// Revokes the token whose id (digest prefix, at least 8 hex characters) is `id`; returns
    /// how many were revoked (0 when none matches or it was already revoked). An ambiguous
    /// prefix revokes nothing and is an error.
    pub async fn revoke(&self, id: &str) -> Result<u64, StoreError> {
        if id.len() < 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::Query(sqlx::Error::Protocol(format!(
                "token id {id:?}: give at least 8 hex characters of the id `tokens list` shows"
            ))));
        }
        let pattern = format!("{}%", id.to_ascii_lowercase());
        let matching: i64 =
            sqlx::query("SELECT COUNT(*) FROM api_tokens WHERE token_sha256 LIKE $1")
                .bind(&pattern)
                .fetch_one(&self.pool)
                .await?
                .try_get(0)?;
        if matching > 1 {
            return Err(StoreError::Query(sqlx::Error::Protocol(format!(
                "token id {id:?} matches {matching} tokens: give more characters"
            ))));
        }
        Ok(sqlx::query(
            "UPDATE api_tokens SET revoked_at_ms = $1 \
             WHERE token_sha256 LIKE $2 AND revoked_at_ms IS NULL",
        )
        .bind(now_ms())
        .bind(&pattern)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::ScratchDb;

    #[tokio::test]
    async fn create_check_list_revoke_on_sqlite_and_postgres() {
        for db in ScratchDb::all().await.unwrap() {
            let tokens = Tokens::new(crate::open(&db.url, 2).await.unwrap());
            let (secret, info) = tokens.create("acme", Some("ci")).await.unwrap();
            assert!(secret.starts_with(TOKEN_PREFIX) && secret.len() == 68);
            let (other, _) = tokens.create("globex", None).await.unwrap();
            assert_ne!(secret, other);
            assert_eq!(
                tokens.tenant_of(&secret).await.unwrap().as_deref(),
                Some("acme")
            );
            assert_eq!(tokens.tenant_of("dft_guess").await.unwrap(), None);
            assert_eq!(tokens.list(Some("acme")).await.unwrap(), vec![info.clone()]);
            assert_eq!(tokens.list(None).await.unwrap().len(), 2);
            assert!(tokens.revoke("abc").await.is_err(), "too short an id");
            assert_eq!(tokens.revoke(&info.id).await.unwrap(), 1);
            assert_eq!(tokens.revoke(&info.id).await.unwrap(), 0);
            assert_eq!(tokens.tenant_of(&secret).await.unwrap(), None);
            assert_eq!(
                tokens.tenant_of(&other).await.unwrap().as_deref(),
                Some("globex")
            );
            assert!(
                tokens.list(Some("acme")).await.unwrap()[0]
                    .revoked_at_ms
                    .is_some()
            );
            db.drop_now().await.unwrap();
        }
    }
}
