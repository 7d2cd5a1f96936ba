//! Throw-away databases for tests: a SQLite file in a temporary directory, or a fresh schema
//! in the PostgreSQL named by `DATABASE_URL` (dropped on [`ScratchDb::drop_now`]), so tests
//! never see each other's rows.

use crate::{Backend, StoreError, connect};

/// A database that exists for one test.
#[derive(Debug)]
pub struct ScratchDb {
    /// URL to hand to the code under test.
    pub url: String,
    backend: Backend,
    admin_url: Option<String>,
    schema: Option<String>,
    _dir: Option<tempfile_dir::TempDir>,
}

mod tempfile_dir {
    /// A directory removed on drop.
    #[derive(Debug)]
    pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl ScratchDb {
    /// A new SQLite file.
    pub fn sqlite() -> Result<Self, StoreError> {
        let dir = std::env::temp_dir().join(format!("docflow-scratch-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::Unavailable(sqlx::Error::Io(e)))?;
        let url = format!("sqlite://{}", dir.join("db.sqlite").display());
        Ok(ScratchDb {
            url,
            backend: Backend::Sqlite,
            admin_url: None,
            schema: None,
            _dir: Some(tempfile_dir::TempDir(dir)),
        })
    }

    /// A new schema in the PostgreSQL at `admin_url`; the returned URL sets `search_path`
    /// to it.
    pub async fn postgres(admin_url: &str) -> Result<Self, StoreError> {
        let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
        let pool = connect(admin_url, 1).await?;
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&pool)
            .await?;
        pool.close().await;
        let sep = if admin_url.contains('?') { '&' } else { '?' };
        let url = format!("{admin_url}{sep}options=-c%20search_path%3D{schema}");
        Ok(ScratchDb {
            url,
            backend: Backend::Postgres,
            admin_url: Some(admin_url.to_owned()),
            schema: Some(schema),
            _dir: None,
        })
    }

    /// PostgreSQL when `DATABASE_URL` names one, else SQLite.
    pub async fn from_env() -> Result<Self, StoreError> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if Backend::of(&url).ok() == Some(Backend::Postgres) => {
                Self::postgres(&url).await
            }
            _ => Self::sqlite(),
        }
    }

    /// Every backend this machine can test: SQLite always, PostgreSQL when `DATABASE_URL`
    /// names one.
    pub async fn all() -> Result<Vec<Self>, StoreError> {
        let mut out = vec![Self::sqlite()?];
        if let Ok(url) = std::env::var("DATABASE_URL")
            && Backend::of(&url).ok() == Some(Backend::Postgres)
        {
            out.push(Self::postgres(&url).await?);
        }
        Ok(out)
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Drops the PostgreSQL schema (SQLite files go with the value).
    pub async fn drop_now(self) -> Result<(), StoreError> {
        if let (Some(admin), Some(schema)) = (&self.admin_url, &self.schema) {
            let pool = connect(admin, 1).await?;
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&pool)
                .await?;
            pool.close().await;
        }
        Ok(())
    }
}
