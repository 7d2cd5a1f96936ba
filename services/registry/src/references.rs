//! Schema references: Confluent's `references: [{name, subject, version}]`, by which a schema
//! uses named types (records, enums, fixed) registered under other subjects.
//!
//! A schema with references is stored as sent, with its references beside it. Whenever it is
//! checked for compatibility it is first made self-contained: the referenced schemas (and
//! theirs, dependencies first) are parsed together with it, and each referenced type is
//! written out in full where it is first used. The compatibility rules then compare complete
//! schemas, so a change to a referenced type is seen like any other change.

use serde::{Deserialize, Serialize};

pub use docflow_events::references::parse_with;

/// One reference of a schema to a named type registered under another subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    /// Full name of the referenced type, as the schema uses it.
    pub name: String,
    /// Subject the type is registered under.
    pub subject: String,
    /// Version of that subject (`-1`: the latest when the reference is resolved).
    pub version: i64,
}

/// Encodes references for the `references_json` column (`[]` when there are none).
pub(crate) fn to_column(refs: &[SchemaReference]) -> String {
    serde_json::to_string(refs).unwrap_or_else(|_| "[]".to_owned())
}

/// Decodes the `references_json` column; a damaged value reads as no references and the
/// schema then fails to parse with a message that names the missing type.
pub(crate) fn from_column(text: &str) -> Vec<SchemaReference> {
    serde_json::from_str(text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_column_round_trips() {
        let refs = vec![SchemaReference {
            name: "io.t.Address".into(),
            subject: "address".into(),
            version: 1,
        }];
        assert_eq!(from_column(&to_column(&refs)), refs);
        assert!(from_column("[]").is_empty());
    }
}
