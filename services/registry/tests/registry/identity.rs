//! Which schemas are "the same" (same id, no new version): as Confluent decides it — its
//! canonical string by default, its normalized form with `?normalize=true`, and within a
//! subject any equivalent version — ported from Confluent's and Karapace's tests and code
//! (the cases' sources are in `src/store/canonical/tests.rs`). And fingerprints stored under
//! the rule before are recomputed when the registry starts.

use docflow_stack::EmbeddedRegistry;
use docflow_store::scratch::ScratchDb;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::support::{Harness, assert_error};

fn doc_record(extra: Value) -> Value {
    let mut r = json!({
        "type": "record",
        "name": "com.acme.n.Doc",
        "fields": [{"name": "id", "type": "string"}, {"name": "pages", "type": "int"}],
    });
    if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            r.insert(k.clone(), v.clone());
        }
    }
    r
}

async fn id_of(h: &Harness, subject: &str, schema: &Value) -> i64 {
    let (s, body) = h.register(subject, schema).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    body["id"].as_i64().unwrap()
}

async fn versions(h: &Harness, subject: &str) -> Value {
    h.get(&format!("/subjects/{subject}/versions")).await.1
}

async fn register_with(
    h: &Harness,
    query: &str,
    subject: &str,
    schema: &Value,
) -> (StatusCode, Value) {
    h.send(
        "POST",
        &format!("/subjects/{subject}/versions{query}"),
        json!({"schema": schema.to_string()}),
    )
    .await
}

#[tokio::test]
async fn schemas_are_the_same_as_confluent_decides() {
    for h in Harness::all().await {
        // {"type":"int"} is "int" (Confluent's RestApiTest.testCanonicalization).
        let a = id_of(&h, "prim", &json!({"type": "int"})).await;
        assert_eq!(id_of(&h, "prim", &json!("int")).await, a);
        assert_eq!(
            id_of(&h, "prim", &json!({"type":   "int", "name": "x"})).await,
            a
        );
        assert_eq!(versions(&h, "prim").await, json!([1]));
        // A full name is its namespace and name, in this subject and in another.
        let full = id_of(&h, "doc", &doc_record(json!({}))).await;
        let mut split = doc_record(json!({"namespace": "com.acme.n"}));
        split["name"] = json!("Doc");
        assert_eq!(id_of(&h, "doc", &split).await, full);
        assert_eq!(id_of(&h, "doc-too", &split).await, full);
        // Key order, whitespace and an explicit ascending order change nothing.
        let spelled = r#"{ "fields" : [ {"type":"string","name":"id","order":"ascending"},
            {"name":"pages","type":{"type":"int"}} ], "name":"Doc", "namespace":"com.acme.n", "type":"record" }"#;
        let (s, body) = h
            .send("POST", "/subjects/doc/versions", json!({"schema": spelled}))
            .await;
        assert_eq!((s, body["id"].as_i64()), (StatusCode::OK, Some(full)));
        assert_eq!(versions(&h, "doc").await, json!([1]));
        // ... and so is a lookup.
        let (s, found) = h
            .send("POST", "/subjects/doc", json!({"schema": spelled}))
            .await;
        assert_eq!(s, StatusCode::OK, "{found}");
        assert_eq!(
            (found["id"].as_i64(), found["version"].as_i64()),
            (Some(full), Some(1))
        );
        // A doc is part of a schema: another id and version, in both modes; and a lookup
        // of it answers 40403.
        let with_doc = doc_record(json!({"doc": "a document"}));
        let (s, found) = h
            .send(
                "POST",
                "/subjects/doc",
                json!({"schema": with_doc.to_string()}),
            )
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{found}");
        assert_eq!(found["error_code"], 40403);
        let documented = id_of(&h, "doc", &with_doc).await;
        assert_ne!(documented, full);
        assert_eq!(versions(&h, "doc").await, json!([1, 2]));
        // Aliases in another order are equivalent within the subject that has them
        // (Confluent's per-subject fallback); another subject gets another id.
        let ab = doc_record(json!({"name": "com.acme.n.Aliased", "aliases": ["A", "B"]}));
        let ba = doc_record(json!({"name": "com.acme.n.Aliased", "aliases": ["B", "A"]}));
        let aliased = id_of(&h, "aliased", &ab).await;
        assert_eq!(id_of(&h, "aliased", &ba).await, aliased);
        assert_eq!(versions(&h, "aliased").await, json!([1]));
        assert_ne!(id_of(&h, "aliased-elsewhere", &ba).await, aliased);
        h.finish().await;
    }
}

#[tokio::test]
async fn normalize_registers_and_finds_by_the_normalized_form() {
    for h in Harness::all().await {
        let double = |default: Value| {
            json!({"type": "record", "name": "M", "fields": [
                {"name": "x", "type": "double", "default": default}]})
        };
        // 1 and 1.0 as a double's default: one schema once normalized (both are 1.0)...
        let (s, one) = register_with(&h, "?normalize=true", "m", &double(json!(1))).await;
        assert_eq!(s, StatusCode::OK, "{one}");
        let (_, again) =
            register_with(&h, "?normalize=True", "m-elsewhere", &double(json!(1.0))).await;
        assert_eq!(
            again["id"], one["id"],
            "normalized alike, the same id in any subject"
        );
        // ... and a lookup normalized finds it.
        let (s, found) = h
            .send(
                "POST",
                "/subjects/m?normalize=TRUE",
                json!({"schema": double(json!(1.0)).to_string()}),
            )
            .await;
        assert_eq!(
            (s, found["version"].as_i64()),
            (StatusCode::OK, Some(1)),
            "{found}"
        );
        // Without normalize, 1 and 1.0 are two spellings Confluent keeps apart.
        let plain = id_of(&h, "n", &double(json!(1))).await;
        assert_ne!(id_of(&h, "n2", &double(json!(1.0))).await, plain);
        // normalize keeps what a schema says: a doc is still another schema.
        let mut documented = double(json!(1));
        documented["doc"] = json!("M's doc");
        let (_, other) = register_with(&h, "?normalize=true", "m", &documented).await;
        assert_ne!(other["id"], one["id"]);
        // A flag that is not a boolean is refused, never read as false.
        for bad in ["maybe", "1", "yes"] {
            assert_error(
                register_with(&h, &format!("?normalize={bad}"), "m", &double(json!(1))).await,
                400,
                400,
            );
        }
        h.finish().await;
    }
}

/// Rows fingerprinted under the rule before (sorted JSON keys) are recomputed when the
/// registry starts; two rows the canonical string makes one keep both ids.
#[tokio::test]
async fn fingerprints_of_the_rule_before_are_recomputed_at_start() {
    for db in ScratchDb::all().await.unwrap() {
        let registry = EmbeddedRegistry::start(&db.url).await.unwrap();
        let h = Harness {
            registry,
            db,
            http: reqwest::Client::new(),
        };
        let a = id_of(&h, "a", &json!({"type": "string"})).await;
        let b = id_of(&h, "b", &json!({"type": "long"})).await;
        let Harness { registry, db, http } = h;
        registry.stop().await;
        // As the rule before stored them (sha256 of the sorted JSON): {"type":"long"} and
        // "long" were two schemas, and the bare "long"'s old fingerprint is its canonical
        // one.
        let old = |text: &str| hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let pool = docflow_store::connect(&db.url, 2).await.unwrap();
        for (id, fingerprint) in [
            (a, old(r#"{"type":"string"}"#)),
            (b, old(r#"{"type":"long"}"#)),
        ] {
            sqlx::query(
                "UPDATE sr_schemas SET fingerprint = $1, identity = 'json-sorted' WHERE id = $2",
            )
            .bind(fingerprint)
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
        }
        sqlx::query(
            "INSERT INTO sr_schemas (id, fingerprint, schema_type, schema_text, references_json, identity) \
             VALUES ($1, $2, 'AVRO', '\"long\"', '[]', 'json-sorted')",
        )
        .bind(b + 1)
        .bind(old(r#""long""#))
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO sr_versions (subject, version, schema_id, deleted) VALUES ('c', 1, $1, 0)",
        )
        .bind(b + 1)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("INSERT INTO sr_subjects (subject, last_version) VALUES ('c', 1)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;

        let registry = EmbeddedRegistry::start(&db.url).await.unwrap();
        let h = Harness { registry, db, http };
        // Found by what they mean again, by any spelling.
        assert_eq!(id_of(&h, "a", &json!("string")).await, a);
        assert_eq!(id_of(&h, "b", &json!("long")).await, b);
        assert_eq!(versions(&h, "a").await, json!([1]));
        // The later duplicate keeps its id and its subject still finds it.
        assert_eq!(id_of(&h, "c", &json!({"type": "long"})).await, b + 1);
        assert_eq!(versions(&h, "c").await, json!([1]));
        let (s, by_id) = h.get(&format!("/schemas/ids/{}", b + 1)).await;
        assert_eq!(
            (s, by_id["schema"].as_str()),
            (StatusCode::OK, Some("\"long\""))
        );
        // A new subject with it gets the first one's id.
        assert_eq!(id_of(&h, "d", &json!("long")).await, b);
        h.finish().await;
    }
}
