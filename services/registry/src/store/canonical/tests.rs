//! Tests of the canonical, normalized and equivalence forms.
//!
//! `CASES` and `PAIRS` hold Confluent's own expected strings where its tests state them
//! (ids `confluent-*`, and the `canonical_equal` / `equivalent` / `normalized_equal` verdicts
//! of the identity pairs), and otherwise strings computed from a model of Avro Java's and
//! Confluent's code. serde_json without `preserve_order` hands the parser object keys sorted,
//! which changes the order of custom properties in a few expectations: `SORTED_MAP` holds
//! those.

use super::*;

/// One schema with its expected forms; `"ERROR"`: the schema is rejected.
struct Case {
    id: &'static str,
    input: &'static str,
    /// Full names defined by referenced schemas.
    known: &'static [&'static str],
    canonical: &'static str,
    normalized: &'static str,
    equivalence: &'static str,
    /// What `defined_names` returns.
    defined: &'static [&'static str],
}

/// Two schemas and whether Confluent takes them as the same.
struct Pair {
    id: &'static str,
    a: &'static str,
    b: &'static str,
    /// Same canonical string: the same id, in any subject.
    canonical_equal: bool,
    /// `canonical_equal` when serde_json's `Map` sorts keys.
    canonical_equal_sorted_map: bool,
    /// `AvroSchema.equivalent`: the same version, in the same subject.
    equivalent: bool,
    /// Same normalized string: the same id with `?normalize=true`.
    normalized_equal: bool,
}

/// One of the three forms.
type Form = fn(&Value, &[String]) -> Result<String, String>;

const FORMS: [(&str, Form); 3] = [
    ("canonical", canonical),
    ("normalized", normalized),
    ("equivalence", equivalence_key),
];

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Whether serde_json keeps object keys in text order (its `preserve_order` feature).
fn map_keeps_order() -> bool {
    let value = parse(r#"{"b":0,"a":0}"#);
    value.as_object().unwrap().keys().next().map(String::as_str) == Some("b")
}

/// The expectation for `form` of case `id`: from `SORTED_MAP` where that applies.
fn expected(id: &str, form: &str, ordered: &'static str) -> &'static str {
    if map_keeps_order() {
        return ordered;
    }
    SORTED_MAP
        .iter()
        .find(|(i, f, _)| *i == id && *f == form)
        .map_or(ordered, |(_, _, alternative)| *alternative)
}

#[test]
fn cases() {
    for case in CASES {
        let schema = parse(case.input);
        let known = strings(case.known);
        let wanted = [case.canonical, case.normalized, case.equivalence];
        for ((form, f), want) in FORMS.into_iter().zip(wanted) {
            let got = f(&schema, &known);
            let want = expected(case.id, form, want);
            if want == "ERROR" {
                assert!(got.is_err(), "{} {form}: {got:?}", case.id);
            } else {
                assert_eq!(got.as_deref(), Ok(want), "{} {form}", case.id);
            }
        }
        let defined = defined_names(&schema, &known);
        if case.canonical == "ERROR" {
            assert!(defined.is_err(), "{}", case.id);
        } else {
            assert_eq!(defined.unwrap(), strings(case.defined), "{}", case.id);
        }
    }
}

#[test]
fn forms_are_fixed_points() {
    for case in CASES.iter().filter(|c| c.canonical != "ERROR") {
        let known = strings(case.known);
        let schema = parse(case.input);
        for (form, f) in FORMS {
            let once = f(&schema, &known).unwrap();
            let twice = f(&parse(&once), &known).unwrap();
            assert_eq!(twice, once, "{} {form}", case.id);
        }
        let canonical_text = canonical(&schema, &known).unwrap();
        assert_eq!(
            equivalence_key(&parse(&canonical_text), &known),
            equivalence_key(&schema, &known),
            "{}",
            case.id
        );
    }
}

#[test]
fn identity_pairs() {
    let keeps_order = map_keeps_order();
    for pair in PAIRS {
        let (a, b) = (parse(pair.a), parse(pair.b));
        let canonical_equal = if keeps_order {
            pair.canonical_equal
        } else {
            pair.canonical_equal_sorted_map
        };
        let wanted = [canonical_equal, pair.normalized_equal, pair.equivalent];
        for ((form, f), want) in FORMS.into_iter().zip(wanted) {
            let same = f(&a, &[]).unwrap() == f(&b, &[]).unwrap();
            assert_eq!(same, want, "{} {form}", pair.id);
        }
    }
}

#[test]
fn an_int_object_is_the_int_name() {
    let object = parse(r#"{"type":"int"}"#);
    let name = parse(r#""int""#);
    assert_eq!(canonical(&object, &[]).unwrap(), r#""int""#);
    assert_eq!(canonical(&name, &[]).unwrap(), r#""int""#);
    for (form, f) in FORMS {
        assert_eq!(f(&object, &[]), f(&name, &[]), "{form}");
    }
}

#[test]
fn a_full_name_is_its_namespace_and_name() {
    let full = parse(
        r#"{"type":"record","name":"com.acme.n.Doc","fields":[{"name":"id","type":"string"}]}"#,
    );
    let split = parse(
        r#"{"type":"record","namespace":"com.acme.n","name":"Doc","fields":[{"name":"id","type":"string"}]}"#,
    );
    let want = r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"id","type":"string"}]}"#;
    assert_eq!(canonical(&full, &[]).unwrap(), want);
    assert_eq!(canonical(&split, &[]).unwrap(), want);
    for (form, f) in FORMS {
        assert_eq!(f(&full, &[]), f(&split, &[]), "{form}");
    }
}

#[test]
fn a_doc_change_is_another_schema() {
    let plain = parse(
        r#"{"type":"record","namespace":"com.acme.n","name":"Doc","fields":[{"name":"id","type":"string"}]}"#,
    );
    let documented = parse(
        r#"{"type":"record","namespace":"com.acme.n","name":"Doc","doc":"A document","fields":[{"name":"id","type":"string"}]}"#,
    );
    assert_eq!(
        canonical(&documented, &[]).unwrap(),
        r#"{"type":"record","name":"Doc","namespace":"com.acme.n","doc":"A document","fields":[{"name":"id","type":"string"}]}"#
    );
    for (form, f) in FORMS {
        assert_ne!(f(&plain, &[]), f(&documented, &[]), "{form}");
    }
}

#[test]
fn referenced_types_are_written_by_name() {
    let known = strings(&["com.acme.Meta"]);
    let top = parse(r#""com.acme.Meta""#);
    assert_eq!(canonical(&top, &known).unwrap(), r#""com.acme.Meta""#);
    let doc = parse(
        r#"{"type":"record","name":"Doc","namespace":"com.acme","fields":[{"name":"m","type":"Meta"}]}"#,
    );
    assert_eq!(
        canonical(&doc, &known).unwrap(),
        r#"{"type":"record","name":"Doc","namespace":"com.acme","fields":[{"name":"m","type":"Meta"}]}"#
    );
    assert!(canonical(&doc, &[]).is_err());
}

#[test]
fn a_type_object_may_name_a_defined_type() {
    let by_object = parse(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E","symbols":["X"]}},{"name":"b","type":{"type":"E"}}]}"#,
    );
    let by_name = parse(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"enum","name":"E","symbols":["X"]}},{"name":"b","type":"E"}]}"#,
    );
    for (form, f) in FORMS {
        assert_eq!(
            f(&by_object, &[]).unwrap(),
            f(&by_name, &[]).unwrap(),
            "{form}"
        );
    }
}

#[test]
fn what_avro_java_rejects_is_an_error() {
    let rejected = [
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int","order":"sideways"}]}"#,
        r#"{"type":"record","name":"R","aliases":null,"fields":[]}"#,
        r#"{"type":"record","name":"R","aliases":[1],"fields":[]}"#,
        r#"{"type":"enum","name":"E","symbols":["A",1]}"#,
        r#"{"type":"fixed","name":"F","size":-1}"#,
        r#"{"type":"fixed","name":"F","size":16.0}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":"one"}]}"#,
        r#"{"type":"record","name":"R","fields":["a"]}"#,
        r#"{"type":"record","name":"R","fields":[{"type":"int"}]}"#,
        r#"{"type":{"type":"int"}}"#,
        r#"["null","Missing"]"#,
    ];
    for text in rejected {
        for (form, f) in FORMS {
            assert!(f(&parse(text), &[]).is_err(), "{form}: {text}");
        }
    }
}

#[test]
fn read_as_avro_java_reads() {
    // Aliases are one set of full names; a doc that is not a string is no doc.
    let aliases =
        parse(r#"{"type":"record","name":"R","namespace":"n","aliases":["A","n.A"],"fields":[]}"#);
    assert_eq!(
        canonical(&aliases, &[]).unwrap(),
        r#"{"type":"record","name":"R","namespace":"n","fields":[],"aliases":["A"]}"#
    );
    let doc = parse(r#"{"type":"record","name":"R","doc":5,"fields":[]}"#);
    assert_eq!(
        canonical(&doc, &[]).unwrap(),
        r#"{"type":"record","name":"R","fields":[]}"#
    );
    // Order is read case-insensitively; a string default of a double field is a number.
    let field = parse(
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","order":"IGNORE","default":" -2.5d "},{"name":"n","type":"float","default":"-Infinity"}]}"#,
    );
    assert_eq!(
        canonical(&field, &[]).unwrap(),
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":-2.5,"order":"ignore"},{"name":"n","type":"float","default":"-Infinity"}]}"#
    );
}

#[test]
fn normalize_converts_defaults_as_java_does() {
    // A union's default is read against its first branch: an int against "null" is no
    // value, so normalize leaves the default out.
    let union = parse(
        r#"{"type":"record","name":"R","fields":[{"name":"u","type":["null","int"],"default":1}]}"#,
    );
    assert_eq!(
        canonical(&union, &[]).unwrap(),
        r#"{"type":"record","name":"R","fields":[{"name":"u","type":["null","int"],"default":1}]}"#
    );
    assert_eq!(
        normalized(&union, &[]).unwrap(),
        r#"{"type":"record","name":"R","fields":[{"name":"u","type":["null","int"]}]}"#
    );
    // Narrowed to a float: 16777217 is not a float.
    let float = parse(
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"float","default":16777217}]}"#,
    );
    assert_eq!(
        normalized(&float, &[]).unwrap(),
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":"float","default":16777216.0}]}"#
    );
}

// BEGIN GENERATED by check_port.py: do not edit by hand.
const CASES: &[Case] = &[
    Case {
        id: "pcf-ns-inherit",
        input: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"k","type":"string"}]}},{"name":"again","type":"Meta"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"k","type":"string"}]}},{"name":"again","type":"Meta"}]}"#,
        normalized: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"k","type":"string"}]}},{"name":"again","type":"Meta"}]}"#,
        equivalence: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"k","type":"string"}]}},{"name":"again","type":"Meta"}]}"#,
        defined: &["com.acme.n.Doc", "com.acme.n.Meta"],
    },
    Case {
        id: "pcf-fullname",
        input: r#"{"type":"record","name":"com.acme.n.Doc","fields":[{"name":"id","type":"string"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"id","type":"string"}]}"#,
        normalized: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"id","type":"string"}]}"#,
        equivalence: r#"{"type":"record","name":"Doc","namespace":"com.acme.n","fields":[{"name":"id","type":"string"}]}"#,
        defined: &["com.acme.n.Doc"],
    },
    Case {
        id: "pcf-ns-nearest-enclosing",
        input: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"y","fields":[{"name":"c","type":{"type":"enum","name":"C","symbols":["S"]}}]}}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"y","fields":[{"name":"c","type":{"type":"enum","name":"C","symbols":["S"]}}]}}]}"#,
        normalized: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"y","fields":[{"name":"c","type":{"type":"enum","name":"C","symbols":["S"]}}]}}]}"#,
        equivalence: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"y","fields":[{"name":"c","type":{"type":"enum","name":"C","symbols":["S"]}}]}}]}"#,
        defined: &["x.A", "y.B", "y.C"],
    },
    Case {
        id: "pcf-dotted-name-sets-namespace",
        input: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"p.q.B","namespace":"ignored","fields":[{"name":"c","type":{"type":"fixed","name":"F","size":4}}]}}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"p.q","fields":[{"name":"c","type":{"type":"fixed","name":"F","size":4}}]}}]}"#,
        normalized: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"p.q","fields":[{"name":"c","type":{"type":"fixed","name":"F","size":4}}]}}]}"#,
        equivalence: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"record","name":"B","namespace":"p.q","fields":[{"name":"c","type":{"type":"fixed","name":"F","size":4}}]}}]}"#,
        defined: &["x.A", "p.q.B", "p.q.F"],
    },
    Case {
        id: "pcf-empty-namespace",
        input: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"enum","name":"E","namespace":"","symbols":["S"]}}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"enum","name":"E","namespace":"","symbols":["S"]}}]}"#,
        normalized: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"enum","name":"E","symbols":["S"]}}]}"#,
        equivalence: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"b","type":{"type":"enum","name":"E","namespace":"","symbols":["S"]}}]}"#,
        defined: &["x.A", "E"],
    },
    Case {
        id: "pcf-recursive-in-collections",
        input: r#"{"type":"array","items":{"type":"map","values":{"type":"record","name":"R","namespace":"n","fields":[{"name":"self","type":["null","R"]}]}}}"#,
        known: &[],
        canonical: r#"{"type":"array","items":{"type":"map","values":{"type":"record","name":"R","namespace":"n","fields":[{"name":"self","type":["null","R"]}]}}}"#,
        normalized: r#"{"type":"array","items":{"type":"map","values":{"type":"record","name":"R","namespace":"n","fields":[{"name":"self","type":["null","R"]}]}}}"#,
        equivalence: r#"{"type":"array","items":{"type":"map","values":{"type":"record","name":"R","namespace":"n","fields":[{"name":"self","type":["null","R"]}]}}}"#,
        defined: &["n.R"],
    },
    Case {
        id: "pcf-logical-primitive",
        input: r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        known: &[],
        canonical: r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        normalized: r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        equivalence: r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        defined: &[],
    },
    Case {
        id: "pcf-decimal",
        input: r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}"#,
        known: &[],
        canonical: r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}"#,
        normalized: r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}"#,
        equivalence: r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}"#,
        defined: &[],
    },
    Case {
        id: "pcf-logical-fixed",
        input: r#"{"type":"fixed","name":"d","size":12,"logicalType":"duration","aliases":["x"],"doc":"d"}"#,
        known: &[],
        canonical: r#"{"type":"fixed","name":"d","doc":"d","size":12,"logicalType":"duration","aliases":["x"]}"#,
        normalized: r#"{"type":"fixed","name":"d","doc":"d","size":12,"logicalType":"duration","aliases":["x"]}"#,
        equivalence: r#"{"type":"fixed","name":"d","doc":"d","size":12,"logicalType":"duration","aliases":["x"]}"#,
        defined: &["d"],
    },
    Case {
        id: "pcf-string-escapes",
        input: r#"{"type":"record","name":"R","doc":"caf\u00e9","fields":[{"name":"f","type":{"type":"enum","name":"E","symbols":["\u0041"]}}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","doc":"café","fields":[{"name":"f","type":{"type":"enum","name":"E","symbols":["A"]}}]}"#,
        normalized: r#"{"type":"record","name":"R","doc":"café","fields":[{"name":"f","type":{"type":"enum","name":"E","symbols":["A"]}}]}"#,
        equivalence: r#"{"type":"record","name":"R","doc":"café","fields":[{"name":"f","type":{"type":"enum","name":"E","symbols":["A"]}}]}"#,
        defined: &["R", "E"],
    },
    Case {
        id: "pcf-custom-props",
        input: r#"{"type":"array","items":{"type":"int","x":1},"y":[1,2]}"#,
        known: &[],
        canonical: r#"{"type":"array","items":{"type":"int","x":1},"y":[1,2]}"#,
        normalized: r#"{"type":"array","items":{"type":"int","x":1},"y":[1,2]}"#,
        equivalence: r#"{"type":"array","items":{"type":"int","x":1},"y":[1,2]}"#,
        defined: &[],
    },
    Case {
        id: "pcf-error-is-record",
        input: r#"{"type":"error","name":"Oops","fields":[]}"#,
        known: &[],
        canonical: r#"{"type":"error","name":"Oops","fields":[]}"#,
        normalized: r#"{"type":"record","name":"Oops","fields":[]}"#,
        equivalence: r#"{"type":"record","name":"Oops","fields":[]}"#,
        defined: &["Oops"],
    },
    Case {
        id: "pcf-primitive-name-attr",
        input: r#"{"type":"int","name":"foo"}"#,
        known: &[],
        canonical: r#""int""#,
        normalized: r#""int""#,
        equivalence: r#""int""#,
        defined: &[],
    },
    Case {
        id: "pcf-enum-default-stripped",
        input: r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#,
        known: &[],
        canonical: r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#,
        normalized: r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#,
        equivalence: r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#,
        defined: &["E"],
    },
    Case {
        id: "pcf-type-object-not-string",
        input: r#"{"type":{"type":"int"}}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "pcf-fixed-size-string",
        input: r#"{"type":"fixed","name":"f","size":"16"}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "confluent-testCanonicalization",
        input: r#"{   "type":   "string"}"#,
        known: &[],
        canonical: r#""string""#,
        normalized: r#""string""#,
        equivalence: r#""string""#,
        defined: &[],
    },
    Case {
        id: "confluent-testNormalization",
        input: r#"{"type":"record","name":"myrecord","doc":"hi\"there","fields":[{"type":"string","name":"f1","doc":"bye\"now"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"myrecord","doc":"hi\"there","fields":[{"name":"f1","type":"string","doc":"bye\"now"}]}"#,
        normalized: r#"{"type":"record","name":"myrecord","doc":"hi\"there","fields":[{"name":"f1","type":"string","doc":"bye\"now"}]}"#,
        equivalence: r#"{"type":"record","name":"myrecord","doc":"hi\"there","fields":[{"name":"f1","type":"string","doc":"bye\"now"}]}"#,
        defined: &["myrecord"],
    },
    Case {
        id: "confluent-testNormalizationPreservesMetadataForPrimitiveTypes",
        input: r#"{"connect.name": "some.scope.Envelope","fields": [{"default": null,"name": "before","type": ["null",{"connect.name": "some.scope.Value","fields": [{"name": "created_at","type": {"connect.name": "io.debezium.time.Timestamp","connect.version": 1,"type": "long"}},{"name":"normal_long","type":"long"}],"name": "Value","type": "record"}]},{"default": null,"name": "after","type": ["null","Value"]}],"name": "Envelope","namespace": "some.scope","type": "record"}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"Envelope","namespace":"some.scope","fields":[{"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"created_at","type":{"type":"long","connect.name":"io.debezium.time.Timestamp","connect.version":1}},{"name":"normal_long","type":"long"}],"connect.name":"some.scope.Value"}],"default":null},{"name":"after","type":["null","Value"],"default":null}],"connect.name":"some.scope.Envelope"}"#,
        normalized: r#"{"type":"record","name":"Envelope","namespace":"some.scope","fields":[{"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"created_at","type":{"type":"long","connect.name":"io.debezium.time.Timestamp","connect.version":1}},{"name":"normal_long","type":"long"}],"connect.name":"some.scope.Value"}],"default":null},{"name":"after","type":["null","Value"],"default":null}],"connect.name":"some.scope.Envelope"}"#,
        equivalence: r#"{"type":"record","name":"Envelope","namespace":"some.scope","fields":[{"name":"before","type":["null",{"type":"record","name":"Value","fields":[{"name":"created_at","type":{"type":"long","connect.name":"io.debezium.time.Timestamp","connect.version":1}},{"name":"normal_long","type":"long"}],"connect.name":"some.scope.Value"}],"default":null},{"name":"after","type":["null","Value"],"default":null}],"connect.name":"some.scope.Envelope"}"#,
        defined: &["some.scope.Envelope", "some.scope.Value"],
    },
    Case {
        id: "norm-aliases-sorted",
        input: r#"{"type":"record","name":"R","aliases":["b","a"],"fields":[{"name":"f","type":"int","aliases":["z","y"]}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"f","type":"int","aliases":["z","y"]}],"aliases":["b","a"]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"f","type":"int","aliases":["y","z"]}],"aliases":["a","b"]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"f","type":"int","aliases":["y","z"]}],"aliases":["a","b"]}"#,
        defined: &["R"],
    },
    Case {
        id: "norm-props-sorted",
        input: r#"{"type":"record","name":"R","fields":[],"zprop":{"b":2,"a":1},"aprop":1}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[],"zprop":{"b":2,"a":1},"aprop":1}"#,
        normalized: r#"{"type":"record","name":"R","fields":[],"aprop":1,"zprop":{"a":1,"b":2}}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[],"aprop":1,"zprop":{"a":1,"b":2}}"#,
        defined: &["R"],
    },
    Case {
        id: "norm-double-default",
        input: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1}]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1.0}]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1}]}"#,
        defined: &["R"],
    },
    Case {
        id: "norm-empty-doc",
        input: r#"{"type":"record","name":"R","doc":"","fields":[]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","doc":"","fields":[]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[]}"#,
        equivalence: r#"{"type":"record","name":"R","doc":"","fields":[]}"#,
        defined: &["R"],
    },
    Case {
        id: "norm-keeps-doc-default-logical",
        input: r#"{"type":"record","name":"R","doc":"x","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},"default":0,"doc":"y"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","doc":"x","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},"doc":"y","default":0}]}"#,
        normalized: r#"{"type":"record","name":"R","doc":"x","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},"doc":"y","default":0}]}"#,
        equivalence: r#"{"type":"record","name":"R","doc":"x","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},"doc":"y","default":0}]}"#,
        defined: &["R"],
    },
    Case {
        id: "ref-same-namespace",
        input: r#"{"type":"record","name":"Doc","namespace":"com.acme","fields":[{"name":"m","type":"Meta"},{"name":"n","type":"com.acme.Meta"}]}"#,
        known: &["com.acme.Meta"],
        canonical: r#"{"type":"record","name":"Doc","namespace":"com.acme","fields":[{"name":"m","type":"Meta"},{"name":"n","type":"Meta"}]}"#,
        normalized: r#"{"type":"record","name":"Doc","namespace":"com.acme","fields":[{"name":"m","type":"Meta"},{"name":"n","type":"Meta"}]}"#,
        equivalence: r#"{"type":"record","name":"Doc","namespace":"com.acme","fields":[{"name":"m","type":"Meta"},{"name":"n","type":"Meta"}]}"#,
        defined: &["com.acme.Doc"],
    },
    Case {
        id: "ref-other-namespace",
        input: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"m","type":"com.acme.Meta"}]}"#,
        known: &["com.acme.Meta"],
        canonical: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"m","type":"com.acme.Meta"}]}"#,
        normalized: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"m","type":"com.acme.Meta"}]}"#,
        equivalence: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"m","type":"com.acme.Meta"}]}"#,
        defined: &["org.x.Doc"],
    },
    Case {
        id: "ref-top-level",
        input: r#""com.acme.Meta""#,
        known: &["com.acme.Meta"],
        canonical: r#""com.acme.Meta""#,
        normalized: r#""com.acme.Meta""#,
        equivalence: r#""com.acme.Meta""#,
        defined: &[],
    },
    Case {
        id: "ref-no-namespace-from-namespaced",
        input: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"b","type":"Bare","default":"X"}]}"#,
        known: &["Bare"],
        canonical: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"b","type":"Bare","default":"X"}]}"#,
        normalized: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"b","type":"Bare","default":"X"}]}"#,
        equivalence: r#"{"type":"record","name":"Doc","namespace":"org.x","fields":[{"name":"b","type":"Bare","default":"X"}]}"#,
        defined: &["org.x.Doc"],
    },
    Case {
        id: "ref-redefined",
        input: r#"{"type":"record","name":"com.acme.Meta","fields":[]}"#,
        known: &["com.acme.Meta"],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "ref-undefined",
        input: r#"{"type":"record","name":"Doc","fields":[{"name":"m","type":"Meta"}]}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "norm-everything",
        input: r#"{"type":"record","name":"R","namespace":"n","aliases":["Old","m.Older","Old"],"doc":"d","zeta":true,"alpha":{"y":[{"b":1,"a":2}],"x":null},"fields":[{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2,"connect.name":"x"},"aliases":["b","a","b"],"order":"Descending"},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"],"default":"B","doc":"","zz":1},"default":"A","doc":""},{"name":"f","type":{"type":"fixed","name":"F","size":16,"logicalType":"uuid"},"order":"ignore"},{"name":"list","type":{"type":"array","items":"E","k":{"b":1,"a":[{"d":1,"c":2}]}},"default":[]},{"name":"m","type":{"type":"map","values":["null","F"]},"default":{}},{"name":"t","type":{"type":"int","logicalType":"date","b":1,"a":2},"default":0}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2,"connect.name":"x"},"order":"descending","aliases":["b","a"]},{"name":"e","type":{"type":"enum","name":"E","doc":"","symbols":["A","B"],"default":"B","zz":1},"doc":"","default":"A"},{"name":"f","type":{"type":"fixed","name":"F","size":16,"logicalType":"uuid"},"order":"ignore"},{"name":"list","type":{"type":"array","items":"E","k":{"b":1,"a":[{"d":1,"c":2}]}},"default":[]},{"name":"m","type":{"type":"map","values":["null","F"]},"default":{}},{"name":"t","type":{"type":"int","logicalType":"date","b":1,"a":2},"default":0}],"zeta":true,"alpha":{"y":[{"b":1,"a":2}],"x":null},"aliases":["Old","m.Older"]}"#,
        normalized: r#"{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2,"connect.name":"x"},"order":"descending","aliases":["a","b"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"],"default":"B","zz":1},"doc":"","default":"A"},{"name":"f","type":{"type":"fixed","name":"F","size":16,"logicalType":"uuid"},"order":"ignore"},{"name":"list","type":{"type":"array","items":"E","k":{"a":[{"c":2,"d":1}],"b":1}},"default":[]},{"name":"m","type":{"type":"map","values":["null","F"]},"default":{}},{"name":"t","type":{"type":"int","logicalType":"date","a":2,"b":1},"default":0}],"alpha":{"x":null,"y":[{"a":2,"b":1}]},"zeta":true,"aliases":["m.Older","Old"]}"#,
        equivalence: r#"{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"amount","type":{"type":"bytes","connect.name":"x","logicalType":"decimal","precision":9,"scale":2},"order":"descending","aliases":["a","b"]},{"name":"e","type":{"type":"enum","name":"E","doc":"","symbols":["A","B"],"default":"B","zz":1},"doc":"","default":"A"},{"name":"f","type":{"type":"fixed","name":"F","size":16,"logicalType":"uuid"},"order":"ignore"},{"name":"list","type":{"type":"array","items":"E","k":{"a":[{"c":2,"d":1}],"b":1}},"default":[]},{"name":"m","type":{"type":"map","values":["null","F"]},"default":{}},{"name":"t","type":{"type":"int","a":2,"b":1,"logicalType":"date"},"default":0}],"alpha":{"x":null,"y":[{"a":2,"b":1}]},"zeta":true,"aliases":["Old","m.Older"]}"#,
        defined: &["n.R", "n.E", "n.F"],
    },
    Case {
        id: "norm-decimal-scale-zero",
        input: r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":0,"a":1}"#,
        known: &[],
        canonical: r#"{"type":"bytes","logicalType":"decimal","precision":4,"scale":0,"a":1}"#,
        normalized: r#"{"type":"bytes","logicalType":"decimal","precision":4,"a":1,"scale":0}"#,
        equivalence: r#"{"type":"bytes","a":1,"logicalType":"decimal","precision":4,"scale":0}"#,
        defined: &[],
    },
    Case {
        id: "norm-nested-error-and-renamed-null-namespace",
        input: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"e","type":{"type":"error","name":"Oops","namespace":"","aliases":["Was"],"fields":[]}},{"name":"again","type":"Oops"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"e","type":{"type":"error","name":"Oops","namespace":"","fields":[],"aliases":["Was"]}},{"name":"again","type":"Oops"}]}"#,
        normalized: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"e","type":{"type":"record","name":"Oops","fields":[],"aliases":["Was"]}},{"name":"again","type":"Oops"}]}"#,
        equivalence: r#"{"type":"record","name":"A","namespace":"x","fields":[{"name":"e","type":{"type":"record","name":"Oops","namespace":"","fields":[],"aliases":["Was"]}},{"name":"again","type":"Oops"}]}"#,
        defined: &["x.A", "Oops"],
    },
    Case {
        id: "string-default-on-double",
        input: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":"1.5"},{"name":"f","type":"float","default":"2"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1.5},{"name":"f","type":"float","default":2.0}]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1.5},{"name":"f","type":"float","default":2.0}]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"d","type":"double","default":1.5},{"name":"f","type":"float","default":2.0}]}"#,
        defined: &["R"],
    },
    Case {
        id: "float-defaults",
        input: r#"{"type":"record","name":"R","fields":[{"name":"a","type":"float","default":1},{"name":"b","type":"float","default":0.1},{"name":"c","type":["float","null"],"default":3}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"a","type":"float","default":1},{"name":"b","type":"float","default":0.1},{"name":"c","type":["float","null"],"default":3}]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"a","type":"float","default":1.0},{"name":"b","type":"float","default":0.1},{"name":"c","type":["float","null"],"default":3.0}]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"a","type":"float","default":1},{"name":"b","type":"float","default":0.1},{"name":"c","type":["float","null"],"default":3}]}"#,
        defined: &["R"],
    },
    Case {
        id: "java-default-array-of-double",
        input: r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"double"},"default":[1,2.5]},{"name":"m","type":{"type":"map","values":"float"},"default":{"z":1,"y":0.5}}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"double"},"default":[1,2.5]},{"name":"m","type":{"type":"map","values":"float"},"default":{"z":1,"y":0.5}}]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"double"},"default":[1.0,2.5]},{"name":"m","type":{"type":"map","values":"float"},"default":{"y":0.5,"z":1.0}}]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"double"},"default":[1,2.5]},{"name":"m","type":{"type":"map","values":"float"},"default":{"y":0.5,"z":1}}]}"#,
        defined: &["R"],
    },
    Case {
        id: "java-default-record",
        input: r#"{"type":"record","name":"R","fields":[{"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"d","type":"double"}]},"default":{"x":1,"d":2}},{"name":"again","type":"I","default":{"d":3,"x":4}}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"d","type":"double"}]},"default":{"x":1,"d":2}},{"name":"again","type":"I","default":{"d":3,"x":4}}]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"d","type":"double"}]},"default":{"d":2.0,"x":1}},{"name":"again","type":"I","default":{"d":3.0,"x":4}}]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"d","type":"double"}]},"default":{"d":2,"x":1}},{"name":"again","type":"I","default":{"d":3,"x":4}}]}"#,
        defined: &["R", "I"],
    },
    Case {
        id: "java-default-bytes",
        input: r#"{"type":"record","name":"R","fields":[{"name":"b","type":"bytes","default":"\u00ff\u0100"}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"R","fields":[{"name":"b","type":"bytes","default":"ÿĀ"}]}"#,
        normalized: r#"{"type":"record","name":"R","fields":[{"name":"b","type":"bytes","default":"ÿ?"}]}"#,
        equivalence: r#"{"type":"record","name":"R","fields":[{"name":"b","type":"bytes","default":"ÿĀ"}]}"#,
        defined: &["R"],
    },
    Case {
        id: "props-on-collections-and-field",
        input: r#"{"type":"map","values":{"type":"array","items":{"type":"long","name":"ignored","p":[3,2]},"q":"v"},"r":{"s":1}}"#,
        known: &[],
        canonical: r#"{"type":"map","values":{"type":"array","items":{"type":"long","p":[3,2]},"q":"v"},"r":{"s":1}}"#,
        normalized: r#"{"type":"map","values":{"type":"array","items":{"type":"long","p":[3,2]},"q":"v"},"r":{"s":1}}"#,
        equivalence: r#"{"type":"map","values":{"type":"array","items":{"type":"long","p":[3,2]},"q":"v"},"r":{"s":1}}"#,
        defined: &[],
    },
    Case {
        id: "union-of-named",
        input: r#"["null",{"type":"enum","name":"E","namespace":"a.b","symbols":["S"]},"a.b.E"]"#,
        known: &[],
        canonical: r#"["null",{"type":"enum","name":"E","namespace":"a.b","symbols":["S"]},"a.b.E"]"#,
        normalized: r#"["null",{"type":"enum","name":"E","namespace":"a.b","symbols":["S"]},"a.b.E"]"#,
        equivalence: r#"["null",{"type":"enum","name":"E","namespace":"a.b","symbols":["S"]},"a.b.E"]"#,
        defined: &["a.b.E"],
    },
    Case {
        id: "short-name-that-is-a-type-name",
        input: r#"{"type":"record","name":"n.int","fields":[{"name":"self","type":["null","n.int"]}]}"#,
        known: &[],
        canonical: r#"{"type":"record","name":"int","namespace":"n","fields":[{"name":"self","type":["null","n.int"]}]}"#,
        normalized: r#"{"type":"record","name":"int","namespace":"n","fields":[{"name":"self","type":["null","n.int"]}]}"#,
        equivalence: r#"{"type":"record","name":"int","namespace":"n","fields":[{"name":"self","type":["null","n.int"]}]}"#,
        defined: &["n.int"],
    },
    Case {
        id: "primitive-with-null-prop",
        input: r#"{"type":"string","p":null}"#,
        known: &[],
        canonical: r#"{"type":"string","p":null}"#,
        normalized: r#"{"type":"string","p":null}"#,
        equivalence: r#"{"type":"string","p":null}"#,
        defined: &[],
    },
    Case {
        id: "err-not-a-schema",
        input: r#"1"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-unknown-type",
        input: r#"{"type":"invalid_type"}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-record-without-fields",
        input: r#"{"type":"record","name":"R"}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-record-without-name",
        input: r#"{"type":"record","fields":[]}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-field-without-type",
        input: r#"{"type":"record","name":"R","fields":[{"name":"a"}]}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-aliases-not-array",
        input: r#"{"type":"record","name":"R","aliases":"A","fields":[]}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-duplicate-name",
        input: r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"fixed","name":"R","size":1}}]}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
    Case {
        id: "err-array-without-items",
        input: r#"{"type":"array"}"#,
        known: &[],
        canonical: r#"ERROR"#,
        normalized: r#"ERROR"#,
        equivalence: r#"ERROR"#,
        defined: &[],
    },
];

const SORTED_MAP: &[(&str, &str, &str)] = &[
    (
        "norm-props-sorted",
        "canonical",
        r#"{"type":"record","name":"R","fields":[],"aprop":1,"zprop":{"a":1,"b":2}}"#,
    ),
    (
        "norm-everything",
        "canonical",
        r#"{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"amount","type":{"type":"bytes","connect.name":"x","logicalType":"decimal","precision":9,"scale":2},"order":"descending","aliases":["b","a"]},{"name":"e","type":{"type":"enum","name":"E","doc":"","symbols":["A","B"],"default":"B","zz":1},"doc":"","default":"A"},{"name":"f","type":{"type":"fixed","name":"F","size":16,"logicalType":"uuid"},"order":"ignore"},{"name":"list","type":{"type":"array","items":"E","k":{"a":[{"c":2,"d":1}],"b":1}},"default":[]},{"name":"m","type":{"type":"map","values":["null","F"]},"default":{}},{"name":"t","type":{"type":"int","a":2,"b":1,"logicalType":"date"},"default":0}],"alpha":{"x":null,"y":[{"a":2,"b":1}]},"zeta":true,"aliases":["Old","m.Older"]}"#,
    ),
    (
        "norm-everything",
        "normalized",
        r#"{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"amount","type":{"type":"bytes","connect.name":"x","logicalType":"decimal","precision":9,"scale":2},"order":"descending","aliases":["a","b"]},{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"],"default":"B","zz":1},"doc":"","default":"A"},{"name":"f","type":{"type":"fixed","name":"F","size":16,"logicalType":"uuid"},"order":"ignore"},{"name":"list","type":{"type":"array","items":"E","k":{"a":[{"c":2,"d":1}],"b":1}},"default":[]},{"name":"m","type":{"type":"map","values":["null","F"]},"default":{}},{"name":"t","type":{"type":"int","a":2,"b":1,"logicalType":"date"},"default":0}],"alpha":{"x":null,"y":[{"a":2,"b":1}]},"zeta":true,"aliases":["m.Older","Old"]}"#,
    ),
    (
        "norm-decimal-scale-zero",
        "canonical",
        r#"{"type":"bytes","a":1,"logicalType":"decimal","precision":4,"scale":0}"#,
    ),
    (
        "norm-decimal-scale-zero",
        "normalized",
        r#"{"type":"bytes","a":1,"logicalType":"decimal","precision":4,"scale":0}"#,
    ),
    (
        "java-default-array-of-double",
        "canonical",
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"array","items":"double"},"default":[1,2.5]},{"name":"m","type":{"type":"map","values":"float"},"default":{"y":0.5,"z":1}}]}"#,
    ),
    (
        "java-default-record",
        "canonical",
        r#"{"type":"record","name":"R","fields":[{"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"d","type":"double"}]},"default":{"d":2,"x":1}},{"name":"again","type":"I","default":{"d":3,"x":4}}]}"#,
    ),
];

const PAIRS: &[Pair] = &[
    Pair {
        id: "P01",
        a: r#"{"type":"int"}"#,
        b: r#""int""#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P02",
        a: r#"{"type":"record","name":"com.acme.n.Doc","fields":[{"name":"id","type":"string"}]}"#,
        b: r#"{"type":"record","namespace":"com.acme.n","name":"Doc","fields":[{"name":"id","type":"string"}]}"#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P03",
        a: r#"{"type":"record","name":"Doc","fields":[{"name":"id","type":"string"}]}"#,
        b: r#"{ "fields" : [ { "type" : "string", "name" : "id" } ],
  "name" : "Doc", "type" : "record" }"#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P04",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "doc": "A document", "fields": [{"name": "id", "type": "string"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P05",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string", "doc": "the id"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string", "doc": "identifier"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P06",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "n", "type": "int", "default": 0}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "n", "type": "int", "default": 1}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P07",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "n", "type": "int", "default": 0}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "n", "type": "int"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P08",
        a: r#"{"type":"long","logicalType":"timestamp-millis"}"#,
        b: r#""long""#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P09",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "t", "type": "long"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P10",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "aliases": ["Old"], "fields": [{"name": "id", "type": "string"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P11",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "aliases": ["A", "B"], "fields": [{"name": "id", "type": "string"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "aliases": ["B", "A"], "fields": [{"name": "id", "type": "string"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P12",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string"}], "x": 1, "y": 2}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string"}], "y": 2, "x": 1}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P13",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "m", "type": {"type": "record", "name": "Meta", "namespace": "com.acme.n", "fields": []}}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "m", "type": {"type": "record", "name": "Meta", "fields": []}}]}"#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P14",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "a", "type": {"type": "record", "name": "Meta", "fields": []}}, {"name": "b", "type": "com.acme.n.Meta"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "a", "type": {"type": "record", "name": "Meta", "fields": []}}, {"name": "b", "type": "Meta"}]}"#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P15",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string", "order": "ascending"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string"}]}"#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P16",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string", "order": "descending"}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "id", "type": "string"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P17",
        a: r#"{"type":"string","unique":"x"}"#,
        b: r#""string""#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P18",
        a: r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}"#,
        b: r#"{"type":"enum","name":"E","symbols":["A","B"],"default":"B"}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P19",
        a: r#"{"type":"record","name":"R","doc":"\u0041","fields":[]}"#,
        b: r#"{"type":"record","name":"R","doc":"A","fields":[]}"#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P20",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "d", "type": "double", "default": 1}]}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": [{"name": "d", "type": "double", "default": 1.0}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: true,
    },
    Pair {
        id: "P21",
        a: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "doc": "", "fields": []}"#,
        b: r#"{"type": "record", "name": "Doc", "namespace": "com.acme.n", "fields": []}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: true,
    },
    Pair {
        id: "P22",
        a: r#"{"type":"error","name":"E","fields":[]}"#,
        b: r#"{"type":"record","name":"E","fields":[]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: true,
        normalized_equal: true,
    },
    Pair {
        id: "P23",
        a: r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"}]}"#,
        b: r#"{"type":"record","name":"R","fields":[{"name":"b","type":"int"},{"name":"a","type":"int"}]}"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P24",
        a: r#"["null","string"]"#,
        b: r#"["string","null"]"#,
        canonical_equal: false,
        canonical_equal_sorted_map: false,
        equivalent: false,
        normalized_equal: false,
    },
    Pair {
        id: "P25",
        a: r#"{"type":"int","name":"x"}"#,
        b: r#""int""#,
        canonical_equal: true,
        canonical_equal_sorted_map: true,
        equivalent: true,
        normalized_equal: true,
    },
];
// END GENERATED
