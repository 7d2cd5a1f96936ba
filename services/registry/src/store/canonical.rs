//! Avro schema identity as Confluent Schema Registry computes it: three compact JSON texts
//! of a parsed schema.
//!
//! * [`canonical`]: `AvroSchema.canonicalString()` (Avro Java's `Schema.toString`), the
//!   default identity. Whitespace, key order, `{"type":"int"}` vs `"int"`, a full name vs
//!   `namespace` + `name`, string escapes and `"order":"ascending"` do not change it; `doc`,
//!   defaults, aliases, logical types, custom properties and `error` vs `record` do.
//! * [`normalized`]: `AvroSchema.normalize()` then `canonicalString()`, the identity with
//!   `?normalize=true`. On top of [`canonical`] it sorts properties and aliases, converts
//!   defaults to their field's type (`1` is `1.0` for a double), drops an empty `doc` of a
//!   named type and writes `error` as `record`.
//! * [`equivalence_key`]: two keys are equal exactly when Confluent's `AvroSchema.equivalent`
//!   holds (the per-subject fallback): [`canonical`] with properties, aliases and default
//!   values order-insensitive and `error` written as `record`.
//!
//! Names resolve as Avro Java resolves them: a nested named type inherits the namespace of
//! the nearest enclosing named type, a dotted name carries its own namespace, and a named
//! type is defined once and referred to by name afterwards. Types that referenced schemas
//! define are passed as `known` full names and are always written by name.
//!
//! Custom properties come out in the order the `serde_json::Map` holds them: the order of
//! the text (as in Avro Java) when serde_json's `preserve_order` feature is on, sorted by key
//! when it is off. Numbers are written as serde_json parsed them, so `1e20` stays `1e20`
//! where Jackson writes `1.0E20`: the forms are consistent, not byte-identical with
//! Confluent's.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{Map, Number, Value};

/// Confluent's canonical string (`AvroSchema.canonicalString`): the default identity.
///
/// `known`: full names of the named types that referenced schemas define; they are written
/// by name and never inlined.
pub(crate) fn canonical(schema: &Value, known: &[String]) -> Result<String, String> {
    let parsed = Parser::new(known).parse(schema, None)?;
    write(&parsed, false)
}

/// Confluent's normalized form (`AvroSchema.normalize` then `canonicalString`): the
/// identity with `?normalize=true`. `known` as for [`canonical`].
pub(crate) fn normalized(schema: &Value, known: &[String]) -> Result<String, String> {
    let parsed = Parser::new(known).parse(schema, None)?;
    let mut definitions = HashMap::new();
    collect_definitions(&parsed, &mut definitions);
    let built = normalize(&parsed, &definitions)?;
    canonical(&built, known)
}

/// The per-subject equivalence key (`AvroSchema.equivalent`): [`canonical`] with properties
/// and aliases sorted, object keys in property and default values sorted, and `error`
/// written as `record`. `known` as for [`canonical`].
pub(crate) fn equivalence_key(schema: &Value, known: &[String]) -> Result<String, String> {
    let parsed = Parser::new(known).parse(schema, None)?;
    write(&parsed, true)
}

/// Full names of the named types `schema` defines, in the order they are defined; `known`
/// as for [`canonical`]. Folding this over a schema's referenced schemas (dependencies
/// first) gives the `known` names for the schema itself.
pub(crate) fn defined_names(schema: &Value, known: &[String]) -> Result<Vec<String>, String> {
    let mut parser = Parser::new(known);
    parser.parse(schema, None)?;
    Ok(parser.defined)
}

/// Avro's primitive type names.
const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// The primitive type `name` names, if it is one.
fn primitive(name: &str) -> Option<&'static str> {
    PRIMITIVES.iter().copied().find(|p| *p == name)
}

/// Which keys of a JSON object are attributes rather than custom properties.
#[derive(Clone, Copy)]
enum Reserved {
    Schema,
    /// A schema object's and `default` (the default symbol).
    Enum,
    Field,
}

impl Reserved {
    fn contains(self, key: &str) -> bool {
        let attributes = match self {
            Reserved::Schema => "doc fields items name namespace size symbols values type aliases",
            Reserved::Enum => {
                "doc fields items name namespace size symbols values type aliases default"
            }
            Reserved::Field => "default doc name order type aliases",
        };
        attributes.split(' ').any(|a| a == key)
    }
}

/// Custom properties in the order the schema object holds them.
type Props = Vec<(String, Value)>;

/// A named type's name (Avro Java's `Schema.Name`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Name {
    /// Short name, without dots.
    name: String,
    /// Namespace; `None` for the null namespace (also written `""`).
    space: Option<String>,
}

impl Name {
    /// A name as written in a schema: a dotted name carries its own namespace, any other
    /// takes `space`.
    fn new(name: &str, space: Option<&str>) -> Self {
        let (space, name) = match name.rsplit_once('.') {
            Some((space, short)) => (Some(space), short),
            None => (space, name),
        };
        Name {
            name: name.to_owned(),
            space: space.filter(|s| !s.is_empty()).map(str::to_owned),
        }
    }

    /// `namespace.name`, or `name` in the null namespace.
    fn full(&self) -> String {
        match &self.space {
            Some(space) => format!("{space}.{}", self.name),
            None => self.name.clone(),
        }
    }

    /// How a reference is written where `cur` is the namespace in force: the short name in
    /// its own namespace unless that is an Avro type name (`Schema.Type`), else the full name.
    fn qualified(&self, cur: Option<&str>) -> String {
        let type_name = primitive(&self.name).is_some()
            || matches!(
                self.name.as_str(),
                "record" | "enum" | "array" | "map" | "union" | "fixed"
            );
        if self.space.is_some() && self.space.as_deref() == cur && !type_name {
            self.name.clone()
        } else {
            self.full()
        }
    }
}

/// A parsed schema. A named type appears once as a definition, where the text defines it;
/// every other use is a [`Schema::Ref`].
enum Schema {
    Primitive {
        kind: &'static str,
        props: Props,
    },
    Container {
        container: Container,
        inner: Box<Schema>,
        props: Props,
    },
    Union(Vec<Schema>),
    Named(Box<Named>),
    /// A named type defined earlier in the schema or by a referenced schema.
    Ref(Name),
}

/// An array (of `items`) or a map (of `values`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Container {
    Array,
    Map,
}

impl Container {
    /// The type name and the attribute that holds the inner type.
    fn keys(self) -> (&'static str, &'static str) {
        match self {
            Container::Array => ("array", "items"),
            Container::Map => ("map", "values"),
        }
    }
}

/// A record, enum or fixed definition.
struct Named {
    name: Name,
    doc: Option<String>,
    /// Aliases resolved against the type's own namespace, without duplicates.
    aliases: Vec<Name>,
    props: Props,
    body: Body,
}

/// What a named type is.
enum Body {
    Record {
        error: bool,
        fields: Vec<Field>,
    },
    Enum {
        symbols: Vec<String>,
        default: Option<String>,
    },
    Fixed {
        size: i64,
    },
}

impl Body {
    /// Its type name in Avro Java's `Schema.Type` (`error` is a record).
    fn kind(&self) -> &'static str {
        match self {
            Body::Record { .. } => "record",
            Body::Enum { .. } => "enum",
            Body::Fixed { .. } => "fixed",
        }
    }
}

/// A record field.
struct Field {
    name: String,
    doc: Option<String>,
    schema: Schema,
    /// `ascending`, `descending` or `ignore`.
    order: &'static str,
    default: Option<Value>,
    /// Without duplicates, in the order written.
    aliases: Vec<String>,
    props: Props,
}

/// Avro Java's `Schema.Parser`, keeping everything `Schema.toString` writes.
struct Parser<'a> {
    known: &'a [String],
    /// Full names of the named types parsed so far, in order.
    defined: Vec<String>,
}

impl<'a> Parser<'a> {
    fn new(known: &'a [String]) -> Self {
        Parser {
            known,
            defined: Vec::new(),
        }
    }

    fn is_named(&self, full: &str) -> bool {
        self.defined.iter().chain(self.known).any(|n| n == full)
    }

    /// Parses `node`; `space` is the namespace of the nearest enclosing named type.
    fn parse(&mut self, node: &Value, space: Option<&str>) -> Result<Schema, String> {
        match node {
            Value::String(name) => self.reference(name, space),
            Value::Array(branches) => branches
                .iter()
                .map(|b| self.parse(b, space))
                .collect::<Result<Vec<_>, _>>()
                .map(Schema::Union),
            Value::Object(object) => self.object(object, space),
            other => Err(format!("not an Avro schema: {other}")),
        }
    }

    /// A type written as a name: a primitive, or a named type already defined (looked up in
    /// `space` first, then in the null namespace).
    fn reference(&self, name: &str, space: Option<&str>) -> Result<Schema, String> {
        if let Some(kind) = primitive(name) {
            let props = Props::new();
            return Ok(Schema::Primitive { kind, props });
        }
        let full = match space {
            Some(space) if !name.contains('.') => format!("{space}.{name}"),
            _ => name.to_owned(),
        };
        [full.as_str(), name]
            .into_iter()
            .find(|n| self.is_named(n))
            .map(|n| Schema::Ref(Name::new(n, None)))
            .ok_or_else(|| format!("undefined name: {name}"))
    }

    fn object(&mut self, node: &Map<String, Value>, space: Option<&str>) -> Result<Schema, String> {
        let Some(kind) = node.get("type").and_then(Value::as_str) else {
            return Err("a schema object needs a string \"type\"".to_owned());
        };
        if let Some(kind) = primitive(kind) {
            let props = props(node, Reserved::Schema);
            return Ok(Schema::Primitive { kind, props });
        }
        let (body, name) = match kind {
            "array" | "map" => {
                let container = if kind == "array" {
                    Container::Array
                } else {
                    Container::Map
                };
                let key = container.keys().1;
                let Some(inner) = node.get(key) else {
                    return Err(format!("{kind} has no {key} type"));
                };
                let inner = Box::new(self.parse(inner, space)?);
                let props = props(node, Reserved::Schema);
                return Ok(Schema::Container {
                    container,
                    inner,
                    props,
                });
            }
            "record" | "error" => {
                let name = self.define(node, space)?;
                let Some(fields) = node.get("fields").and_then(Value::as_array) else {
                    return Err(format!("record {} has no fields", name.full()));
                };
                let fields = fields
                    .iter()
                    .map(|f| self.field(f, name.space.as_deref()))
                    .collect::<Result<_, _>>()?;
                let error = kind == "error";
                (Body::Record { error, fields }, name)
            }
            "enum" => {
                let name = self.define(node, space)?;
                let Some(symbols) = node.get("symbols").and_then(Value::as_array) else {
                    return Err(format!("enum {} has no symbols", name.full()));
                };
                let symbols = symbols
                    .iter()
                    .map(|s| {
                        s.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| format!("enum symbol {s} is not a string"))
                    })
                    .collect::<Result<_, _>>()?;
                let default = node.get("default").and_then(Value::as_str);
                let default = default.map(str::to_owned);
                (Body::Enum { symbols, default }, name)
            }
            "fixed" => {
                let name = self.define(node, space)?;
                let size = node.get("size").and_then(Value::as_i64);
                let Some(size) = size.filter(|s| (0..=i64::from(i32::MAX)).contains(s)) else {
                    return Err(format!("fixed {} has an invalid or no size", name.full()));
                };
                (Body::Fixed { size }, name)
            }
            other => {
                // `{"type":"Name"}` names a type already defined, looked up in `space` only.
                let full = Name::new(other, space).full();
                return if self.is_named(&full) {
                    Ok(Schema::Ref(Name::new(&full, None)))
                } else {
                    Err(format!("type not supported: {other}"))
                };
            }
        };
        let mut resolved: Vec<Name> = Vec::new();
        for alias in aliases(node)? {
            let alias = Name::new(&alias, name.space.as_deref());
            if !resolved.contains(&alias) {
                resolved.push(alias);
            }
        }
        let reserved = match body {
            Body::Enum { .. } => Reserved::Enum,
            _ => Reserved::Schema,
        };
        Ok(Schema::Named(Box::new(Named {
            doc: node.get("doc").and_then(Value::as_str).map(str::to_owned),
            aliases: resolved,
            props: props(node, reserved),
            name,
            body,
        })))
    }

    /// The name a named type's object defines; a name defined twice is an error.
    fn define(&mut self, node: &Map<String, Value>, space: Option<&str>) -> Result<Name, String> {
        let Some(short) = node.get("name").and_then(Value::as_str) else {
            return Err("a named type needs a string \"name\"".to_owned());
        };
        let space = node.get("namespace").and_then(Value::as_str).or(space);
        let name = Name::new(short, space);
        let full = name.full();
        if self.is_named(&full) {
            return Err(format!("can't redefine: {full}"));
        }
        self.defined.push(full);
        Ok(name)
    }

    /// A record field; `space` is the record's namespace.
    fn field(&mut self, node: &Value, space: Option<&str>) -> Result<Field, String> {
        let Value::Object(object) = node else {
            return Err(format!("a record field must be an object: {node}"));
        };
        let Some(name) = object.get("name").and_then(Value::as_str) else {
            return Err("a record field needs a string \"name\"".to_owned());
        };
        let Some(ty) = object.get("type") else {
            return Err(format!("field {name} has no type"));
        };
        let schema = self.parse(ty, space)?;
        let order = match object.get("order") {
            None => "ascending",
            Some(order) => match order.as_str().map(str::to_ascii_lowercase).as_deref() {
                Some("ascending") => "ascending",
                Some("descending") => "descending",
                Some("ignore") => "ignore",
                _ => return Err(format!("field {name} has an invalid order: {order}")),
            },
        };
        let floating = matches!(
            schema,
            Schema::Primitive {
                kind: "float" | "double",
                ..
            }
        );
        let default = match object.get("default") {
            Some(Value::String(text)) if floating => Some(double_from_text(text)?),
            other => other.cloned(),
        };
        Ok(Field {
            name: name.to_owned(),
            doc: object.get("doc").and_then(Value::as_str).map(str::to_owned),
            schema,
            order,
            default,
            aliases: aliases(object)?,
            props: props(object, Reserved::Field),
        })
    }
}

/// The custom properties of `node`, in the order `node` holds them.
/// The custom properties of `node`, sorted by key: whatever order the parsed map keeps
/// (serde_json's `preserve_order`, a feature any crate of the build may turn on), the
/// forms, and so the fingerprints, stay the same.
fn props(node: &Map<String, Value>, reserved: Reserved) -> Props {
    let mut out: Props = node
        .iter()
        .filter(|(k, _)| !reserved.contains(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The `aliases` of `node` without duplicates, in the order written.
fn aliases(node: &Map<String, Value>) -> Result<Vec<String>, String> {
    let Some(list) = node.get("aliases") else {
        return Ok(Vec::new());
    };
    let Value::Array(list) = list else {
        return Err(format!("aliases must be an array: {list}"));
    };
    let mut out: Vec<String> = Vec::new();
    for alias in list {
        let Value::String(alias) = alias else {
            return Err(format!("alias is not a string: {alias}"));
        };
        if !out.contains(alias) {
            out.push(alias.clone());
        }
    }
    Ok(out)
}

/// A string default of a float or double field as Avro Java reads it (`Double.valueOf`);
/// the non-finite values come out as Jackson writes them, as strings.
fn double_from_text(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    let number = trimmed
        .strip_suffix(['d', 'D', 'f', 'F'])
        .unwrap_or(trimmed);
    let (negative, magnitude) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    match magnitude {
        "NaN" => Ok(Value::from("NaN")),
        "Infinity" if negative => Ok(Value::from("-Infinity")),
        "Infinity" => Ok(Value::from("Infinity")),
        _ => number
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("default {text:?} is not a number")),
    }
}

/// `value` with the keys of every object in it sorted.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<_> = object.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            let entries = entries.into_iter().map(|(k, v)| (k.clone(), sorted(v)));
            Value::Object(entries.collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// `props` sorted by key.
fn sorted_props(props: &[(String, Value)]) -> Vec<&(String, Value)> {
    let mut entries: Vec<_> = props.iter().collect();
    entries.sort_by(|(a, _), (b, _)| a.cmp(b));
    entries
}

/// Writes `schema` as Avro Java's `Schema.toString` does; `equivalence`: the
/// [`equivalence_key`] variant.
fn write(schema: &Schema, equivalence: bool) -> Result<String, String> {
    let mut writer = Writer {
        out: String::new(),
        equivalence,
    };
    writer.schema(schema, None)?;
    Ok(writer.out)
}

/// Avro Java's `Schema.toJson`, into a string.
struct Writer {
    out: String,
    /// Properties, aliases and default values order-insensitive, `error` as `record`.
    equivalence: bool,
}

impl Writer {
    fn json<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), String> {
        let text = serde_json::to_string(value).map_err(|e| format!("cannot write JSON: {e}"))?;
        self.out.push_str(&text);
        Ok(())
    }

    /// Writes `,"key":value`.
    fn member<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), String> {
        self.out.push(',');
        self.json(key)?;
        self.out.push(':');
        self.json(value)
    }

    /// Writes `schema` where `cur` is the namespace in force.
    fn schema(&mut self, schema: &Schema, cur: Option<&str>) -> Result<(), String> {
        match schema {
            Schema::Primitive { kind, props } if props.is_empty() => self.json(kind),
            Schema::Primitive { kind, props } => {
                self.out.push_str("{\"type\":");
                self.json(kind)?;
                self.props(props)?;
                self.out.push('}');
                Ok(())
            }
            Schema::Container {
                container,
                inner,
                props,
            } => {
                let (kind, key) = container.keys();
                self.out.push_str("{\"type\":");
                self.json(kind)?;
                self.out.push(',');
                self.json(key)?;
                self.out.push(':');
                self.schema(inner, cur)?;
                self.props(props)?;
                self.out.push('}');
                Ok(())
            }
            Schema::Union(branches) => {
                self.out.push('[');
                for (i, branch) in branches.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.schema(branch, cur)?;
                }
                self.out.push(']');
                Ok(())
            }
            Schema::Ref(name) => self.json(&name.qualified(cur)),
            Schema::Named(named) => self.named(named, cur),
        }
    }

    fn named(&mut self, named: &Named, cur: Option<&str>) -> Result<(), String> {
        let kind = match &named.body {
            Body::Record { error: true, .. } if !self.equivalence => "error",
            body => body.kind(),
        };
        self.out.push_str("{\"type\":");
        self.json(kind)?;
        self.member("name", &named.name.name)?;
        let space = named.name.space.as_deref();
        match space {
            Some(space) if Some(space) != cur => self.member("namespace", space)?,
            None if cur.is_some() => self.member("namespace", "")?,
            _ => {}
        }
        if let Some(doc) = &named.doc {
            self.member("doc", doc)?;
        }
        match &named.body {
            Body::Record { fields, .. } => {
                self.out.push_str(",\"fields\":[");
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.field(field, space)?;
                }
                self.out.push(']');
            }
            Body::Enum { symbols, default } => {
                self.member("symbols", symbols)?;
                if let Some(default) = default {
                    self.member("default", default)?;
                }
            }
            Body::Fixed { size } => self.member("size", size)?,
        }
        self.props(&named.props)?;
        if !named.aliases.is_empty() {
            let mut aliases: Vec<String> =
                named.aliases.iter().map(|a| a.qualified(space)).collect();
            if self.equivalence {
                aliases.sort();
            }
            self.member("aliases", &aliases)?;
        }
        self.out.push('}');
        Ok(())
    }

    /// Writes a field of a record whose namespace is `space`.
    fn field(&mut self, field: &Field, space: Option<&str>) -> Result<(), String> {
        self.out.push_str("{\"name\":");
        self.json(&field.name)?;
        self.out.push_str(",\"type\":");
        self.schema(&field.schema, space)?;
        if let Some(doc) = &field.doc {
            self.member("doc", doc)?;
        }
        match &field.default {
            Some(default) if self.equivalence => self.member("default", &sorted(default))?,
            Some(default) => self.member("default", default)?,
            None => {}
        }
        if field.order != "ascending" {
            self.member("order", field.order)?;
        }
        if !field.aliases.is_empty() {
            let mut aliases = field.aliases.clone();
            if self.equivalence {
                aliases.sort();
            }
            self.member("aliases", &aliases)?;
        }
        self.props(&field.props)?;
        self.out.push('}');
        Ok(())
    }

    fn props(&mut self, props: &[(String, Value)]) -> Result<(), String> {
        if self.equivalence {
            for (key, value) in sorted_props(props) {
                self.member(key, &sorted(value))?;
            }
        } else {
            for (key, value) in props {
                self.member(key, value)?;
            }
        }
        Ok(())
    }
}

/// Named types of a schema by full name: their definitions.
type Definitions<'a> = HashMap<String, &'a Schema>;

/// Adds the named types `schema` defines to `out`.
fn collect_definitions<'a>(schema: &'a Schema, out: &mut Definitions<'a>) {
    match schema {
        Schema::Primitive { .. } | Schema::Ref(_) => {}
        Schema::Container { inner, .. } => collect_definitions(inner, out),
        Schema::Union(branches) => {
            for branch in branches {
                collect_definitions(branch, out);
            }
        }
        Schema::Named(named) => {
            out.insert(named.name.full(), schema);
            if let Body::Record { fields, .. } = &named.body {
                for field in fields {
                    collect_definitions(&field.schema, out);
                }
            }
        }
    }
}

/// The schema `AvroSchemaUtils.build` writes for `schema` (Confluent's normalize): full
/// names, each named type defined once and then referred to by full name, logical-type
/// properties first and the other properties sorted by key, aliases sorted, defaults
/// converted to their field's type, an empty `doc` of a named type left out, `error` as
/// `record`. Parsing it again gives the normalized schema.
fn normalize(schema: &Schema, definitions: &Definitions<'_>) -> Result<Value, String> {
    let mut out = Map::new();
    match schema {
        Schema::Primitive { kind, props } if props.is_empty() => return Ok(Value::from(*kind)),
        Schema::Primitive { kind, props } => {
            out.insert("type".to_owned(), Value::from(*kind));
            logical_props(&mut out, props);
            simple_props(&mut out, props);
        }
        Schema::Container {
            container,
            inner,
            props,
        } => {
            let (kind, key) = container.keys();
            out.insert("type".to_owned(), Value::from(kind));
            out.insert(key.to_owned(), normalize(inner, definitions)?);
            logical_props(&mut out, props);
            simple_props(&mut out, props);
        }
        Schema::Union(branches) => {
            let branches = branches.iter().map(|b| normalize(b, definitions));
            return Ok(Value::Array(branches.collect::<Result<_, _>>()?));
        }
        Schema::Ref(name) => return Ok(Value::from(name.full())),
        Schema::Named(named) => {
            out.insert("name".to_owned(), Value::from(named.name.full()));
            out.insert("type".to_owned(), Value::from(named.body.kind()));
            match &named.body {
                Body::Enum { symbols, .. } => {
                    out.insert("symbols".to_owned(), Value::from(symbols.clone()));
                }
                Body::Fixed { size } => {
                    out.insert("size".to_owned(), Value::from(*size));
                }
                Body::Record { fields, .. } => {
                    let fields = fields.iter().map(|f| normalize_field(f, definitions));
                    let fields = fields.collect::<Result<_, _>>()?;
                    out.insert("fields".to_owned(), Value::Array(fields));
                }
            }
            logical_props(&mut out, &named.props);
            if let Some(doc) = named.doc.as_deref().filter(|d| !d.is_empty()) {
                out.insert("doc".to_owned(), Value::from(doc));
            }
            if !named.aliases.is_empty() {
                let aliases: BTreeSet<String> = named.aliases.iter().map(Name::full).collect();
                let aliases: Vec<String> = aliases.into_iter().collect();
                out.insert("aliases".to_owned(), Value::from(aliases));
            }
            if let Body::Enum {
                default: Some(default),
                ..
            } = &named.body
            {
                out.insert("default".to_owned(), Value::from(default.as_str()));
            }
            simple_props(&mut out, &named.props);
        }
    }
    Ok(Value::Object(out))
}

/// A record field as `AvroSchemaUtils.build` writes it (see [`normalize`]).
fn normalize_field(field: &Field, definitions: &Definitions<'_>) -> Result<Value, String> {
    let mut out = Map::new();
    out.insert("name".to_owned(), Value::from(field.name.as_str()));
    out.insert("type".to_owned(), normalize(&field.schema, definitions)?);
    let order = field.order.to_ascii_uppercase();
    out.insert("order".to_owned(), Value::from(order));
    if let Some(doc) = &field.doc {
        out.insert("doc".to_owned(), Value::from(doc.as_str()));
    }
    if !field.aliases.is_empty() {
        let aliases: BTreeSet<&str> = field.aliases.iter().map(String::as_str).collect();
        let aliases: Vec<&str> = aliases.into_iter().collect();
        out.insert("aliases".to_owned(), Value::from(aliases));
    }
    if let Some(default) = &field.default
        && let Some(default) = java_default(default, Some(&field.schema), definitions)?
    {
        out.insert("default".to_owned(), default);
    }
    simple_props(&mut out, &field.props);
    Ok(Value::Object(out))
}

/// `setLogicalProps`: `logicalType`, and for a decimal its `precision` and a non-zero
/// `scale`.
fn logical_props(out: &mut Map<String, Value>, props: &[(String, Value)]) {
    let prop = |key: &str| props.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let Some(logical) = prop("logicalType").filter(Value::is_string) else {
        return;
    };
    let decimal = logical.as_str() == Some("decimal");
    out.insert("logicalType".to_owned(), logical);
    if decimal {
        if let Some(precision) = prop("precision") {
            out.insert("precision".to_owned(), precision);
        }
        if let Some(scale) = prop("scale").filter(|s| s.as_i64() != Some(0)) {
            out.insert("scale".to_owned(), scale);
        }
    }
}

/// `setSimpleProps`: every property, by key, with sorted object keys in its value. A key
/// already written keeps its place.
fn simple_props(out: &mut Map<String, Value>, props: &[(String, Value)]) {
    for (key, value) in sorted_props(props) {
        out.insert(key.clone(), sorted(value));
    }
}

/// A field default as Confluent's normalize writes it: Avro Java's `JacksonUtils.toObject`
/// against `schema` (the first branch of a union; ints become doubles for float and double,
/// also inside arrays, maps and records), then back to JSON with sorted object keys.
/// `Ok(None)`: Java has no value for it and the default is left out. A type defined by a
/// referenced schema is not known here and converts nothing (as Java with no schema).
fn java_default(
    value: &Value,
    schema: Option<&Schema>,
    definitions: &Definitions<'_>,
) -> Result<Option<Value>, String> {
    let schema = match schema {
        Some(Schema::Ref(name)) => definitions.get(&name.full()).copied(),
        other => other,
    };
    if let Some(Schema::Union(branches)) = schema {
        let Some(first) = branches.first() else {
            return Err("a union with no branches has no default".to_owned());
        };
        return java_default(value, Some(first), definitions);
    }
    let kind = match schema {
        Some(Schema::Primitive { kind, .. }) => Some(*kind),
        Some(Schema::Container { container, .. }) => Some(container.keys().0),
        Some(Schema::Named(named)) => Some(named.body.kind()),
        Some(Schema::Union(_) | Schema::Ref(_)) | None => None,
    };
    Ok(match value {
        Value::Null | Value::Bool(_) => Some(value.clone()),
        Value::Number(number) => java_number(number, kind)?,
        Value::String(text) => match kind {
            None | Some("string" | "enum") => Some(value.clone()),
            // Bytes in ISO-8859-1 and back.
            Some("bytes" | "fixed") => Some(Value::String(
                text.chars()
                    .map(|c| if u32::from(c) > 0xFF { '?' } else { c })
                    .collect(),
            )),
            Some(_) => None,
        },
        Value::Array(items) => {
            let element: Option<&Schema> = match schema {
                Some(Schema::Container {
                    container: Container::Array,
                    inner,
                    ..
                }) => Some(inner.as_ref()),
                None => None,
                Some(_) => return Err(format!("default {value} is an array, its type is not")),
            };
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let Some(item) = java_default(item, element, definitions)? else {
                    return Err(format!("default element {item} does not fit its type"));
                };
                out.push(item);
            }
            Some(Value::Array(out))
        }
        Value::Object(object) => {
            let mut out = Map::new();
            for (key, item) in object {
                let member: Option<&Schema> = match schema {
                    Some(Schema::Container {
                        container: Container::Map,
                        inner,
                        ..
                    }) => Some(inner.as_ref()),
                    Some(Schema::Named(named)) => match &named.body {
                        Body::Record { fields, .. } => {
                            let Some(field) = fields.iter().find(|f| f.name == *key) else {
                                return Err(format!("default names no field {key}"));
                            };
                            Some(&field.schema)
                        }
                        _ => None,
                    },
                    _ => None,
                };
                let Some(item) = java_default(item, member, definitions)? else {
                    return Err(format!("default member {key} does not fit its type"));
                };
                out.insert(key.clone(), item);
            }
            Some(sorted(&Value::Object(out)))
        }
    })
}

/// [`java_default`] for a number. Jackson reads an integer that fits 64 bits as an int or
/// long node, a bigger one as a big integer (which Java converts to nothing), any other
/// number as a double.
fn java_number(number: &Number, kind: Option<&str>) -> Result<Option<Value>, String> {
    if let Some(integer) = number.as_i64() {
        return Ok(match kind {
            None | Some("int" | "long") => Some(Value::Number(number.clone())),
            Some("float") => Some(java_float(integer as f64)?),
            Some("double") => Some(java_double(integer as f64)),
            Some(_) => None,
        });
    }
    let Some(double) = number.as_f64().filter(|_| !number.is_u64()) else {
        return Ok(None);
    };
    Ok(match kind {
        None | Some("double") => Some(Value::Number(number.clone())),
        Some("float") => Some(java_float(double)?),
        Some(_) => None,
    })
}

/// A Java `double` as Jackson writes it: the non-finite values as strings.
fn java_double(double: f64) -> Value {
    match Number::from_f64(double) {
        Some(number) => Value::Number(number),
        None if double.is_nan() => Value::from("NaN"),
        None if double > 0.0 => Value::from("Infinity"),
        None => Value::from("-Infinity"),
    }
}

/// A value narrowed to a Java `float`, written as `Float.toString` does and read back as a
/// double.
fn java_float(double: f64) -> Result<Value, String> {
    let single = double as f32;
    if !single.is_finite() {
        return Ok(java_double(f64::from(single)));
    }
    let shortest: f64 = single
        .to_string()
        .parse()
        .map_err(|e| format!("cannot convert {double} to a float: {e}"))?;
    Ok(java_double(shortest))
}

#[cfg(test)]
mod tests;
