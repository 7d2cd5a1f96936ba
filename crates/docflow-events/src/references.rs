//! Avro schemas with references (Confluent's `references`): a schema that uses named types
//! (records, enums, fixed) defined by other schemas, made into one self-contained schema.
//!
//! The referenced schemas (and theirs, dependencies first) are parsed together with the
//! schema, and each referenced type is written out in full where it is first used; later
//! uses stay names, as Avro requires. The registry checks compatibility on the result, and
//! the codec decodes with it.

use std::collections::{HashMap, HashSet};

use apache_avro::Schema;
use serde_json::Value;

/// How deep references may nest (a reference of a reference of ...).
pub const MAX_DEPTH: usize = 32;
/// Most schemas the references of one schema may bring in, all levels together.
pub const MAX_SCHEMAS: usize = 1000;
/// What [`dependencies`]' callers say when either bound is passed.
pub const TOO_MANY: &str =
    "references nest deeper than 32 levels or bring in more than 1000 schemas";

/// The texts of the schemas `roots` refer to, and of the ones those refer to, each once,
/// dependencies before the schemas that use them: what [`parse_with`] takes. `key` names
/// the schema a reference points at (subject and version: two references to it are one);
/// `fetch` looks one reference up and returns its schema text and its own references;
/// `too_many` is the error for references nested deeper than [`MAX_DEPTH`] or bringing in
/// more than [`MAX_SCHEMAS`] schemas (each is a look-up).
pub async fn dependencies<R, K, F, Fut, E>(
    roots: &[R],
    key: impl Fn(&R) -> K,
    fetch: F,
    too_many: impl Fn() -> E,
) -> Result<Vec<String>, E>
where
    R: Clone,
    K: Eq + std::hash::Hash,
    F: Fn(R) -> Fut,
    Fut: std::future::Future<Output = Result<(String, Vec<R>), E>>,
{
    enum Step<R> {
        /// Look the reference up and put its own references above it.
        Visit(R, usize),
        /// Its references are out: the text may follow.
        Emit(R, String),
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut fetched = 0usize;
    let mut stack: Vec<Step<R>> = roots
        .iter()
        .rev()
        .map(|r| Step::Visit(r.clone(), 1))
        .collect();
    while let Some(step) = stack.pop() {
        match step {
            Step::Visit(r, depth) => {
                if depth > MAX_DEPTH || fetched >= MAX_SCHEMAS {
                    return Err(too_many());
                }
                if seen.contains(&key(&r)) {
                    continue;
                }
                fetched += 1;
                let (text, children) = fetch(r.clone()).await?;
                stack.push(Step::Emit(r, text));
                for child in children.into_iter().rev() {
                    stack.push(Step::Visit(child, depth + 1));
                }
            }
            Step::Emit(r, text) => {
                if seen.insert(key(&r)) {
                    out.push(text);
                }
            }
        }
    }
    Ok(out)
}

/// Parses `text` whose named types may come from `dependencies` (schema texts, dependencies
/// before the schemas that use them) into one self-contained schema.
pub fn parse_with(text: &str, dependencies: &[String]) -> Result<Schema, String> {
    if dependencies.is_empty() {
        return Schema::parse_str(text).map_err(|e| e.to_string());
    }
    let (schema, defs) =
        Schema::parse_str_with_list(text, dependencies).map_err(|e| e.to_string())?;
    // Every named type the referenced schemas define, nested ones too (an enum inside a
    // referenced record may be used by name on its own).
    let mut by_name = HashMap::new();
    for def in &defs {
        let json = serde_json::to_value(def).map_err(|e| e.to_string())?;
        collect_definitions(&json, &mut by_name);
    }
    let mut json = serde_json::to_value(&schema).map_err(|e| e.to_string())?;
    let mut written = HashSet::new();
    inline_type(&mut json, &by_name, &mut written);
    Schema::parse(&json).map_err(|e| format!("schema with its references inlined: {e}"))
}

/// Whether `map` defines a named type (record, enum, fixed).
fn is_definition(map: &serde_json::Map<String, Value>) -> bool {
    map.contains_key("name")
        && matches!(
            map.get("type").and_then(Value::as_str),
            Some("record" | "enum" | "fixed")
        )
}

/// Adds every named type defined in `v` (at any depth) to `out`, by full name.
fn collect_definitions(v: &Value, out: &mut HashMap<String, Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| collect_definitions(i, out)),
        Value::Object(map) => {
            if is_definition(map)
                && let Some(name) = full_name(map)
            {
                out.entry(name).or_insert_with(|| v.clone());
            }
            for key in ["type", "items", "values"] {
                if let Some(t) = map.get(key) {
                    collect_definitions(t, out);
                }
            }
            if let Some(Value::Array(fields)) = map.get("fields") {
                for field in fields {
                    if let Some(t) = field.get("type") {
                        collect_definitions(t, out);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Writes each referenced type out in full at its first use (a name in a type position),
/// walking `v` in document order; a type defined again later (inside another referenced
/// type) becomes its name there, as Avro allows one definition per name.
fn inline_type(v: &mut Value, defs: &HashMap<String, Value>, written: &mut HashSet<String>) {
    match v {
        Value::String(name) => {
            if !written.contains(name.as_str())
                && let Some(def) = defs.get(name.as_str())
            {
                *v = def.clone();
                // The definition's own walk records its name as written.
                inline_type(v, defs, written);
            }
        }
        Value::Array(variants) => {
            for variant in variants {
                inline_type(variant, defs, written);
            }
        }
        Value::Object(map) => {
            if is_definition(map)
                && let Some(name) = full_name(map)
                && !written.insert(name.clone())
            {
                *v = Value::String(name);
                return;
            }
            // "record", "array"... are never names of referenced types.
            for key in ["type", "items", "values"] {
                if let Some(t) = map.get_mut(key) {
                    inline_type(t, defs, written);
                }
            }
            if let Some(Value::Array(fields)) = map.get_mut("fields") {
                for field in fields {
                    if let Some(t) = field.get_mut("type") {
                        inline_type(t, defs, written);
                    }
                }
            }
        }
        _ => {}
    }
}

fn full_name(map: &serde_json::Map<String, Value>) -> Option<String> {
    let name = map.get("name")?.as_str()?;
    if name.contains('.') {
        return Some(name.to_owned());
    }
    match map.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => Some(format!("{ns}.{name}")),
        _ => Some(name.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDRESS: &str = r#"{"type":"record","name":"Address","namespace":"io.t",
        "fields":[{"name":"street","type":"string"}]}"#;

    #[test]
    fn a_referenced_type_is_written_out_where_first_used() {
        let person = r#"{"type":"record","name":"Person","namespace":"io.t","fields":[
            {"name":"home","type":"io.t.Address"},
            {"name":"work","type":["null","Address"],"default":null}]}"#;
        let schema = parse_with(person, &[ADDRESS.to_owned()]).unwrap();
        let json = serde_json::to_value(&schema).unwrap();
        assert_eq!(json["fields"][0]["type"]["name"], "Address");
        assert_eq!(json["fields"][0]["type"]["fields"][0]["name"], "street");
        // The second use stays a name.
        assert_eq!(json["fields"][1]["type"][1], "io.t.Address");
        // Self-contained: parses alone.
        Schema::parse_str(&json.to_string()).unwrap();
    }

    /// A type defined inside a referenced record, used by name before the record: written
    /// out at that first use, and a name where the record would define it again.
    #[test]
    fn nested_definitions_of_references_are_written_once() {
        let address = r#"{"type":"record","name":"Address","namespace":"io.t","fields":[
            {"name":"city","type":{"type":"enum","name":"City","symbols":["A","B"]}}]}"#;
        let person = r#"{"type":"record","name":"Person","namespace":"io.t","fields":[
            {"name":"born","type":"io.t.City"},
            {"name":"home","type":"io.t.Address"}]}"#;
        let schema = parse_with(person, &[address.to_owned()]).unwrap();
        let json = serde_json::to_value(&schema).unwrap();
        assert_eq!(json["fields"][0]["type"]["symbols"][1], "B");
        assert_eq!(json["fields"][1]["type"]["fields"][0]["type"], "io.t.City");
        Schema::parse_str(&json.to_string()).unwrap();
    }

    #[test]
    fn dependencies_come_first_once_and_nesting_is_bounded() {
        // a -> [b, c], b -> [c], c -> []
        let graph = |r: &'static str| -> (String, Vec<&'static str>) {
            match r {
                "a" => ("A".into(), vec!["b", "c"]),
                "b" => ("B".into(), vec!["c"]),
                _ => ("C".into(), vec![]),
            }
        };
        let run = |roots: Vec<&'static str>| {
            futures_lite_block_on(dependencies(
                &roots,
                |r| *r,
                |r| async move { Ok::<_, String>(graph(r)) },
                || "too deep".to_owned(),
            ))
        };
        assert_eq!(run(vec!["a"]).unwrap(), vec!["C", "B", "A"]);
        assert_eq!(run(vec!["c", "b"]).unwrap(), vec!["C", "B"]);
        // A cycle (which a registry cannot hold, as references must exist first) ends.
        let cyclic = futures_lite_block_on(dependencies(
            &["x"],
            |r| *r,
            |_| async { Ok::<_, String>(("X".to_owned(), vec!["x"])) },
            || "too deep".to_owned(),
        ));
        assert_eq!(cyclic, Err("too deep".to_owned()));
    }

    /// Polls a future that never waits (the fetches above answer at once).
    fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    #[test]
    fn references_of_references_resolve_and_unknown_names_fail() {
        let city = r#"{"type":"enum","name":"City","namespace":"io.t","symbols":["A","B"]}"#;
        let address = r#"{"type":"record","name":"Address","namespace":"io.t",
            "fields":[{"name":"city","type":"io.t.City"}]}"#;
        let person = r#"{"type":"record","name":"Person","namespace":"io.t",
            "fields":[{"name":"home","type":{"type":"array","items":"io.t.Address"}}]}"#;
        let schema = parse_with(person, &[city.to_owned(), address.to_owned()]).unwrap();
        let json = serde_json::to_value(&schema).unwrap();
        assert_eq!(
            json["fields"][0]["type"]["items"]["fields"][0]["type"]["symbols"][1],
            "B"
        );
        let err = parse_with(person, &[city.to_owned()]).unwrap_err();
        assert!(err.contains("Address"), "{err}");
    }
}
