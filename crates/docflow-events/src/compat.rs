//! Avro compatibility levels with Confluent's meaning.
//!
//! "Compatible" means apache-avro's [`SchemaCompatibility::can_read`] returns
//! [`Compatibility::Full`]; `Partial` (resolution that may fail for some data, such as a
//! removed enum symbol) counts as incompatible, because a consumer must be able to read every
//! record ever written.

use std::fmt;
use std::str::FromStr;

use apache_avro::Schema;
use apache_avro::schema_compatibility::{Compatibility, SchemaCompatibility};

/// A subject's compatibility rule for new versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CompatibilityLevel {
    /// No check.
    None,
    /// The new schema can read data written with the latest version.
    #[default]
    Backward,
    /// ... with every earlier version.
    BackwardTransitive,
    /// Data written with the new schema can be read with the latest version.
    Forward,
    /// ... with every earlier version.
    ForwardTransitive,
    /// Backward and forward against the latest version.
    Full,
    /// Backward and forward against every earlier version.
    FullTransitive,
}

impl CompatibilityLevel {
    /// All levels, in Confluent's spelling order.
    pub const ALL: [CompatibilityLevel; 7] = [
        Self::None,
        Self::Backward,
        Self::BackwardTransitive,
        Self::Forward,
        Self::ForwardTransitive,
        Self::Full,
        Self::FullTransitive,
    ];

    /// Confluent's name of the level.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::Backward => "BACKWARD",
            Self::BackwardTransitive => "BACKWARD_TRANSITIVE",
            Self::Forward => "FORWARD",
            Self::ForwardTransitive => "FORWARD_TRANSITIVE",
            Self::Full => "FULL",
            Self::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// Whether the check runs against every earlier version, not just the latest.
    pub fn is_transitive(self) -> bool {
        matches!(
            self,
            Self::BackwardTransitive | Self::ForwardTransitive | Self::FullTransitive
        )
    }

    fn checks_backward(self) -> bool {
        matches!(
            self,
            Self::Backward | Self::BackwardTransitive | Self::Full | Self::FullTransitive
        )
    }

    fn checks_forward(self) -> bool {
        matches!(
            self,
            Self::Forward | Self::ForwardTransitive | Self::Full | Self::FullTransitive
        )
    }
}

impl fmt::Display for CompatibilityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a compatibility level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compatibility level {0:?}")]
pub struct UnknownLevel(pub String);

impl FromStr for CompatibilityLevel {
    type Err = UnknownLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownLevel(s.to_owned()))
    }
}

fn can_read(writer: &Schema, reader: &Schema) -> Result<(), String> {
    match SchemaCompatibility::can_read(writer, reader) {
        Ok(Compatibility::Full) => Ok(()),
        Ok(Compatibility::Partial) => {
            Err("only partially compatible: some data could fail to resolve".to_owned())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Checks `new` against `existing` (oldest first) under `level`. Returns the reasons it is
/// incompatible, one per failed pair, naming the version (1-based position in `existing`).
pub fn check_compatibility(
    level: CompatibilityLevel,
    existing: &[Schema],
    new: &Schema,
) -> Result<(), Vec<String>> {
    let numbered: Vec<(i64, &Schema)> = (1..).zip(existing).collect();
    check_versions(level, &numbered, new)
}

/// [`check_compatibility`] against versions that carry their own numbers (a registry subject
/// whose earlier versions were deleted): each reason names the real version.
pub fn check_versions(
    level: CompatibilityLevel,
    existing: &[(i64, &Schema)],
    new: &Schema,
) -> Result<(), Vec<String>> {
    if level == CompatibilityLevel::None || existing.is_empty() {
        return Ok(());
    }
    let first = if level.is_transitive() {
        0
    } else {
        existing.len() - 1
    };
    let mut reasons = Vec::new();
    for (n, old) in existing.iter().skip(first) {
        if level.checks_backward()
            && let Err(e) = can_read(old, new)
        {
            reasons.push(format!(
                "new schema cannot read data written with version {n}: {e}"
            ));
        }
        if level.checks_forward()
            && let Err(e) = can_read(new, old)
        {
            reasons.push(format!(
                "version {n} cannot read data written with the new schema: {e}"
            ));
        }
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_names_round_trip() {
        for l in CompatibilityLevel::ALL {
            assert_eq!(l.as_str().parse::<CompatibilityLevel>(), Ok(l));
        }
        assert_eq!(
            "backward".parse::<CompatibilityLevel>(),
            Ok(CompatibilityLevel::Backward)
        );
        assert!("SIDEWAYS".parse::<CompatibilityLevel>().is_err());
        assert_eq!(CompatibilityLevel::default(), CompatibilityLevel::Backward);
    }

    /// The shared vectors in `schemas/compat/vectors.json` (also used by the registry tests).
    #[test]
    fn compatibility_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../schemas/compat/vectors.json"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = doc["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let level: CompatibilityLevel = case["level"].as_str().unwrap().parse().unwrap();
            let old: Vec<Schema> = case["old"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| Schema::parse_str(&s.to_string()).unwrap())
                .collect();
            let new = Schema::parse_str(&case["new"].to_string()).unwrap();
            let want = case["compatible"].as_bool().unwrap();
            let got = check_compatibility(level, &old, &new);
            assert_eq!(got.is_ok(), want, "{name}: {got:?}");
        }
    }
}
