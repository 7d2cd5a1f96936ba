use clap::Args;

/// The relational database of a service (SQLite file by default, PostgreSQL in production).
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// sqlx URL: `sqlite://path/to/file.db` (created if missing) or
    /// `postgres://user:pass@host:5432/db`.
    #[arg(
        id = "database_url",
        long = "database-url",
        env = "DATABASE_URL",
        default_value = "sqlite://docflow.db"
    )]
    pub url: String,

    /// Largest number of pooled connections.
    #[arg(
        id = "database_max_connections",
        long = "database-max-connections",
        env = "DATABASE_MAX_CONNECTIONS",
        default_value_t = 8
    )]
    pub max_connections: u32,
}
