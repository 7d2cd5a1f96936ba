//! Rendered manifests checked against the schemas committed under `infra/schemas/`: the
//! Kubernetes kinds against one strict schema (unknown fields rejected) generated from
//! Kubernetes' OpenAPI spec, custom resources against their CRD's `openAPIV3Schema` made
//! strict the way the API server's strict field validation is (an object that lists its
//! properties accepts no others unless it preserves unknown fields).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::InfraError;
use crate::render::id;

/// The Kubernetes kinds' schema file.
pub const KUBERNETES: &str = "kubernetes-v1.31-strict.json";

/// Compiled schemas.
#[derive(Debug)]
pub struct Schemas {
    kubernetes: jsonschema::Validator,
    crds: BTreeMap<(String, String), jsonschema::Validator>,
}

fn load_json(path: &Path) -> Result<Value, InfraError> {
    let text = std::fs::read_to_string(path).map_err(|source| InfraError::Io {
        path: path.display().to_string(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| InfraError::Schema(format!("{}: {e}", path.display())))
}

fn compile(
    schema: &Value,
    draft: jsonschema::Draft,
    name: &str,
) -> Result<jsonschema::Validator, InfraError> {
    jsonschema::options()
        .with_draft(draft)
        .build(schema)
        .map_err(|e| InfraError::Schema(format!("{name}: {e}")))
}

/// Go's (RE2's) `(?i)` flag, which CRD patterns may use and ECMA-262 regexes (what JSON
/// Schema specifies) lack: the flag dropped, each letter outside a class as `[xX]`.
fn ecma_pattern(pattern: &str) -> String {
    if !pattern.contains("(?i)") {
        return pattern.to_owned();
    }
    let mut out = String::new();
    let mut chars = pattern
        .replace("(?i)", "")
        .chars()
        .collect::<Vec<_>>()
        .into_iter();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            '[' => {
                in_class = true;
                out.push(c);
            }
            ']' => {
                in_class = false;
                out.push(c);
            }
            c if c.is_ascii_alphabetic() && !in_class => {
                out.push('[');
                out.push(c.to_ascii_lowercase());
                out.push(c.to_ascii_uppercase());
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// Closes every object schema that lists `properties` (unless it preserves unknown fields)
/// and makes its patterns ECMA-262.
fn strict(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            if let Some(Value::String(p)) = o.get_mut("pattern") {
                *p = ecma_pattern(p);
            }
            let preserve = o
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if o.contains_key("properties") && !preserve && !o.contains_key("additionalProperties")
            {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            for v in o.values_mut() {
                strict(v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

impl Schemas {
    /// Loads `dir/kubernetes-v1.31-strict.json` and every `<group>_<version>_<Kind>.json`.
    pub fn load(dir: &Path) -> Result<Self, InfraError> {
        let kubernetes = compile(
            &load_json(&dir.join(KUBERNETES))?,
            jsonschema::Draft::Draft202012,
            KUBERNETES,
        )?;
        let mut crds = BTreeMap::new();
        let entries = std::fs::read_dir(dir).map_err(|source| InfraError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".json") else {
                continue;
            };
            let parts: Vec<&str> = stem.split('_').collect();
            let [group, version, kind] = parts[..] else {
                continue;
            };
            let mut schema = load_json(&e.path())?;
            strict(&mut schema);
            // The API server checks these itself; the CRD schema leaves them open.
            if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                props.insert(
                    "apiVersion".into(),
                    serde_json::json!({"const": format!("{group}/{version}")}),
                );
                props.insert("kind".into(), serde_json::json!({"const": kind}));
            }
            crds.insert(
                (format!("{group}/{version}"), kind.to_owned()),
                compile(&schema, jsonschema::Draft::Draft7, &name)?,
            );
        }
        Ok(Schemas { kubernetes, crds })
    }

    /// The custom resources with a schema: (apiVersion, kind).
    pub fn custom_kinds(&self) -> Vec<(String, String)> {
        self.crds.keys().cloned().collect()
    }

    /// What is wrong with `doc` (empty: valid), each as `Kind/name at /path: message`.
    pub fn validate(&self, doc: &Value) -> Vec<String> {
        let api = doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (kind, name) = id(doc);
        let validator = self
            .crds
            .get(&(api.to_owned(), kind.clone()))
            .unwrap_or(&self.kubernetes);
        validator
            .iter_errors(doc)
            .map(|e| format!("{kind}/{name} at {}: {e}", e.instance_path()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_closes_listed_objects_only() {
        let mut s = json!({"type": "object", "properties": {"a": {"type": "object", "properties": {}, "x-kubernetes-preserve-unknown-fields": true},
            "b": {"type": "object", "additionalProperties": {"type": "string"}}}});
        strict(&mut s);
        assert_eq!(s["additionalProperties"], json!(false));
        assert!(s["properties"]["a"].get("additionalProperties").is_none());
        assert_eq!(
            s["properties"]["b"]["additionalProperties"],
            json!({"type": "string"})
        );
        assert_eq!(
            ecma_pattern("^(?i)(abort|warn)?$"),
            "^([aA][bB][oO][rR][tT]|[wW][aA][rR][nN])?$"
        );
        assert_eq!(ecma_pattern("^(?i)a[b-c]\\d$"), "^[aA][b-c]\\d$");
        assert_eq!(ecma_pattern("^x$"), "^x$");
    }
}
