//! `docflow tokens`: API tokens kept in the docflow database, accepted by the ingest API.

use docflow_config::DatabaseArgs;
use docflow_store::Tokens;

async fn open(db: &DatabaseArgs) -> anyhow::Result<Tokens> {
    Ok(Tokens::new(docflow_store::open(&db.url, 2).await?))
}

/// Creates a token and prints it (the only time it is shown).
pub(crate) async fn create(
    db: &DatabaseArgs,
    tenant: &str,
    label: Option<&str>,
) -> anyhow::Result<()> {
    anyhow::ensure!(!tenant.trim().is_empty(), "the tenant must not be empty");
    let (secret, info) = open(db).await?.create(tenant, label).await?;
    println!("{secret}");
    eprintln!(
        "token {} for tenant {} created; it is shown only now",
        info.id, info.tenant_id
    );
    Ok(())
}

/// Lists tokens (never their secrets).
pub(crate) async fn list(db: &DatabaseArgs, tenant: Option<&str>) -> anyhow::Result<()> {
    for t in open(db).await?.list(tenant).await? {
        println!(
            "{}  tenant={}  created_at_ms={}  {}{}",
            t.id,
            t.tenant_id,
            t.created_at_ms,
            if t.revoked_at_ms.is_some() {
                "revoked"
            } else {
                "active"
            },
            t.label.map(|l| format!("  label={l}")).unwrap_or_default()
        );
    }
    Ok(())
}

/// Revokes a token by its id.
pub(crate) async fn revoke(db: &DatabaseArgs, id: &str) -> anyhow::Result<()> {
    let n = open(db).await?.revoke(id).await?;
    anyhow::ensure!(n == 1, "no active token with id {id}");
    println!("revoked {id}");
    Ok(())
}
