//! The schemas of every topic, and the history check that keeps them evolvable.
//!
//! `schemas/<topic>/v<N>.avsc` at the workspace root is the contract. The newest version of
//! each topic is embedded here; [`load_history`] reads every version from disk so that CI can
//! prove each new version is compatible with all earlier ones ([`check_history`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use apache_avro::Schema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::compat::{CompatibilityLevel, check_compatibility};

/// Errors reading or checking schema files.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A schema text is not valid Avro.
    #[error("schema {name} is not valid Avro: {reason}")]
    Invalid {
        /// File or type the schema came from.
        name: String,
        /// Parser message.
        reason: String,
    },
    /// Reading the schemas directory failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file name does not follow `v<N>.avsc`, or versions have gaps.
    #[error("{0}")]
    Layout(String),
    /// A version breaks compatibility with an earlier one.
    #[error("{topic} v{version} is not {level} compatible: {reasons}")]
    Incompatible {
        /// Topic whose history is broken.
        topic: String,
        /// The offending version.
        version: u32,
        /// Level it was checked against.
        level: CompatibilityLevel,
        /// What the checker said.
        reasons: String,
    },
}

/// A record type that is the value of one topic.
pub trait Event: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Topic whose values have this type.
    const TOPIC: &'static str;
    /// The newest schema text of the topic.
    const SCHEMA_JSON: &'static str;

    /// The parsed newest schema (parsed once).
    fn schema() -> Result<&'static Schema, SchemaError>;
}

/// Parses an embedded schema once per process.
pub(crate) fn parse_once(
    cell: &'static OnceLock<Result<Schema, String>>,
    name: &str,
    text: &str,
) -> Result<&'static Schema, SchemaError> {
    cell.get_or_init(|| Schema::parse_str(text).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|reason| SchemaError::Invalid {
            name: name.to_owned(),
            reason: reason.clone(),
        })
}

/// All versions of one topic's schema, oldest first.
#[derive(Debug, Clone)]
pub struct TopicHistory {
    /// The topic (the directory name).
    pub topic: String,
    /// `(version, schema text)`, versions 1..=N without gaps.
    pub versions: Vec<(u32, String)>,
}

/// Reads `dir/<topic>/v<N>.avsc` for every topic directory in `dir` (other directories, such
/// as `compat/`, are skipped when they hold no `.avsc` files).
pub fn load_history(dir: &Path) -> Result<Vec<TopicHistory>, SchemaError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SchemaError::Io { path, source }
    };
    let mut out = Vec::new();
    let mut topics: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    topics.sort();
    for topic_dir in topics {
        let mut versions = Vec::new();
        for entry in std::fs::read_dir(&topic_dir).map_err(io(&topic_dir))? {
            let path = entry.map_err(io(&topic_dir))?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("avsc") {
                continue;
            }
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let version: u32 = stem
                .strip_prefix('v')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| {
                    SchemaError::Layout(format!("{} must be named v<N>.avsc", path.display()))
                })?;
            let text = std::fs::read_to_string(&path).map_err(io(&path))?;
            versions.push((version, text));
        }
        if versions.is_empty() {
            continue;
        }
        versions.sort_by_key(|(v, _)| *v);
        for (i, (v, _)) in versions.iter().enumerate() {
            if *v as usize != i + 1 {
                return Err(SchemaError::Layout(format!(
                    "{}: versions must be v1..vN without gaps, found v{v} at position {}",
                    topic_dir.display(),
                    i + 1
                )));
            }
        }
        let topic = topic_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        out.push(TopicHistory { topic, versions });
    }
    Ok(out)
}

/// Checks that every version of every topic parses and is compatible at `level` with the
/// versions before it (BACKWARD_TRANSITIVE is the project rule).
pub fn check_history(
    histories: &[TopicHistory],
    level: CompatibilityLevel,
) -> Result<(), SchemaError> {
    for h in histories {
        let mut parsed = Vec::with_capacity(h.versions.len());
        for (version, text) in &h.versions {
            let schema = Schema::parse_str(text).map_err(|e| SchemaError::Invalid {
                name: format!("{} v{version}", h.topic),
                reason: e.to_string(),
            })?;
            if let Err(reasons) = check_compatibility(level, &parsed, &schema) {
                return Err(SchemaError::Incompatible {
                    topic: h.topic.clone(),
                    version: *version,
                    level,
                    reasons: reasons.join("; "),
                });
            }
            parsed.push(schema);
        }
    }
    Ok(())
}
