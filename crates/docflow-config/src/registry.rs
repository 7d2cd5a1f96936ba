use std::time::Duration;

use clap::Args;

/// Where the Confluent-compatible schema registry is (our `docflow-registry` in dev and CI;
/// Confluent Schema Registry, Karapace or Redpanda's registry in production).
#[derive(Debug, Clone, Args)]
pub struct RegistryArgs {
    /// Base URL of the registry.
    #[arg(
        id = "schema_registry_url",
        long = "schema-registry-url",
        env = "SCHEMA_REGISTRY_URL",
        default_value = "http://127.0.0.1:8081"
    )]
    pub url: url::Url,

    /// Basic-auth user (Confluent Cloud: the API key).
    #[arg(
        id = "schema_registry_username",
        long = "schema-registry-username",
        env = "SCHEMA_REGISTRY_USERNAME"
    )]
    pub username: Option<String>,

    /// Basic-auth password (Confluent Cloud: the API secret).
    #[arg(
        id = "schema_registry_password",
        long = "schema-registry-password",
        env = "SCHEMA_REGISTRY_PASSWORD",
        hide_env_values = true
    )]
    pub password: Option<String>,

    /// Timeout of one registry request.
    #[arg(
        id = "schema_registry_timeout",
        long = "schema-registry-timeout",
        env = "SCHEMA_REGISTRY_TIMEOUT",
        default_value = "10s",
        value_parser = crate::parse_duration
    )]
    pub timeout: Duration,
}

impl RegistryArgs {
    /// Arguments for an unauthenticated registry at `url`.
    pub fn at(url: url::Url) -> Self {
        RegistryArgs {
            url,
            username: None,
            password: None,
            timeout: Duration::from_secs(10),
        }
    }
}
