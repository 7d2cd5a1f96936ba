use clap::{Args, ValueEnum};
use rdkafka::ClientConfig;

/// How clients talk to the brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SecurityProtocol {
    /// No TLS, no authentication (the embedded broker).
    Plaintext,
    /// TLS without SASL.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS (Confluent Cloud, MSK with SCRAM).
    SaslSsl,
}

impl SecurityProtocol {
    fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }
}

/// SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanism {
    /// Username and password in the clear (only over TLS).
    #[value(name = "PLAIN")]
    Plain,
    /// SCRAM with SHA-256.
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    /// SCRAM with SHA-512.
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Connection to the Kafka cluster (any Kafka-API broker: Apache Kafka, Redpanda, MSK,
/// Confluent Cloud, or the embedded Nisshi).
#[derive(Debug, Clone, Args)]
pub struct KafkaArgs {
    /// Comma-separated bootstrap servers, host:port.
    #[arg(
        long = "kafka-bootstrap-servers",
        env = "KAFKA_BOOTSTRAP_SERVERS",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap_servers: String,

    /// Security protocol.
    #[arg(
        long = "kafka-security-protocol",
        env = "KAFKA_SECURITY_PROTOCOL",
        value_enum,
        default_value = "PLAINTEXT"
    )]
    pub security_protocol: SecurityProtocol,

    /// SASL mechanism, with SASL_PLAINTEXT or SASL_SSL.
    #[arg(
        long = "kafka-sasl-mechanism",
        env = "KAFKA_SASL_MECHANISM",
        value_enum
    )]
    pub sasl_mechanism: Option<SaslMechanism>,

    /// SASL username.
    #[arg(long = "kafka-sasl-username", env = "KAFKA_SASL_USERNAME")]
    pub sasl_username: Option<String>,

    /// SASL password.
    #[arg(
        long = "kafka-sasl-password",
        env = "KAFKA_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub sasl_password: Option<String>,

    /// PEM file of CA certificates to verify the brokers (default: the system store).
    #[arg(long = "kafka-ssl-ca-location", env = "KAFKA_SSL_CA_LOCATION")]
    pub ssl_ca_location: Option<std::path::PathBuf>,

    /// Client id reported to the brokers (defaults to the service name).
    #[arg(long = "kafka-client-id", env = "KAFKA_CLIENT_ID")]
    pub client_id: Option<String>,

    /// Raw librdkafka property, `key=value`; repeatable; applied last, so it overrides
    /// everything above. The escape hatch for options docflow does not name.
    #[arg(
        long = "kafka-option",
        short = 'X',
        env = "KAFKA_OPTIONS",
        value_delimiter = ',',
        value_parser = crate::parse_key_value
    )]
    pub options: Vec<(String, String)>,
}

impl KafkaArgs {
    /// Arguments for a plaintext broker at `bootstrap_servers` (tests, the embedded stack).
    pub fn plaintext(bootstrap_servers: impl Into<String>) -> Self {
        KafkaArgs {
            bootstrap_servers: bootstrap_servers.into(),
            security_protocol: SecurityProtocol::Plaintext,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            ssl_ca_location: None,
            client_id: None,
            options: Vec::new(),
        }
    }

    /// The librdkafka configuration these arguments describe; `client_id` is used when none
    /// was given.
    pub fn client_config(&self, client_id: &str) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &self.bootstrap_servers)
            .set("client.id", self.client_id.as_deref().unwrap_or(client_id))
            .set("security.protocol", self.security_protocol.as_librdkafka());
        if let Some(m) = self.sasl_mechanism {
            cfg.set("sasl.mechanism", m.as_librdkafka());
        }
        if let Some(u) = &self.sasl_username {
            cfg.set("sasl.username", u);
        }
        if let Some(p) = &self.sasl_password {
            cfg.set("sasl.password", p);
        }
        if let Some(ca) = &self.ssl_ca_location {
            cfg.set("ssl.ca.location", ca.to_string_lossy());
        }
        for (k, v) in &self.options {
            cfg.set(k, v);
        }
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kafka: KafkaArgs,
    }

    #[test]
    fn sasl_scram_over_tls() {
        let cli = Cli::try_parse_from([
            "x",
            "--kafka-bootstrap-servers",
            "b1:9093,b2:9093",
            "--kafka-security-protocol",
            "SASL_SSL",
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-512",
            "--kafka-sasl-username",
            "svc",
            "--kafka-sasl-password",
            "secret",
            "-X",
            "socket.timeout.ms=5000",
        ])
        .unwrap();
        let cfg = cli.kafka.client_config("ingest");
        assert_eq!(cfg.get("bootstrap.servers"), Some("b1:9093,b2:9093"));
        assert_eq!(cfg.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(cfg.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(cfg.get("sasl.username"), Some("svc"));
        assert_eq!(cfg.get("sasl.password"), Some("secret"));
        assert_eq!(cfg.get("client.id"), Some("ingest"));
        assert_eq!(cfg.get("socket.timeout.ms"), Some("5000"));
    }

    #[test]
    fn raw_options_must_be_key_value() {
        assert!(Cli::try_parse_from(["x", "-X", "novalue"]).is_err());
    }
}
