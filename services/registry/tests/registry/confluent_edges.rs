//! The edges Confluent's own clients walk on: capitalised flags, JSON errors everywhere,
//! trailing slashes, content negotiation, compatibility-check corner cases, schema
//! references, and a database that refuses connections.

use docflow_store::scratch::ScratchDb;
use serde_json::{Value, json};

use crate::support::{Harness, assert_error, raw, record};

fn doc(fields: Value) -> Value {
    record("Doc", fields)
}

fn v1() -> Value {
    doc(json!([{"name": "id", "type": "string"}]))
}

fn v2() -> Value {
    doc(
        json!([{"name": "id", "type": "string"}, {"name": "n", "type": ["null", "int"], "default": null}]),
    )
}

#[tokio::test]
async fn capitalised_flags_trailing_slashes_and_json_errors() {
    for h in Harness::all().await {
        h.register("f-value", &v1()).await;
        h.register("f-value", &v2()).await;
        assert_eq!(h.delete("/subjects/f-value/versions/1").await.0, 200);

        // What confluent-kafka's Python client sends.
        assert_eq!(
            h.get("/subjects/f-value/versions?deleted=False").await.1,
            json!([2])
        );
        assert_eq!(
            h.get("/subjects/f-value/versions?deleted=True").await.1,
            json!([1, 2])
        );
        assert_eq!(
            h.get("/subjects/f-value/versions?deleted=TRUE").await.1,
            json!([1, 2])
        );
        let (s, body) = h
            .send(
                "POST",
                "/subjects/f-value?normalize=False&deleted=False",
                json!({"schema": v2().to_string()}),
            )
            .await;
        assert_eq!((s.as_u16(), &body["version"]), (200, &json!(2)), "{body}");
        let (s, body) = h
            .send(
                "POST",
                "/compatibility/subjects/f-value/versions/latest?verbose=True",
                json!({"schema": v2().to_string()}),
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(body, json!({"is_compatible": true, "messages": []}));

        // A flag that is not a boolean: a JSON 400 that names it.
        let got = h.get("/subjects?deleted=maybe").await;
        assert!(
            got.1["message"].as_str().unwrap().contains("deleted"),
            "{:?}",
            got.1
        );
        assert_error(got, 400, 400);

        // Trailing slashes are the same endpoints.
        assert_eq!(h.get("/subjects/").await.1, json!(["f-value"]));
        assert_eq!(
            h.get("/subjects/f-value/versions/?deleted=true").await.1,
            json!([1, 2])
        );

        // Unknown paths and wrong methods answer in the JSON shape too.
        assert_error(h.get("/no/such/endpoint").await, 404, 404);
        assert_error(h.delete("/schemas/types").await, 405, 405);
        assert_error(
            h.send("PATCH", "/subjects/f-value/versions", json!({}))
                .await,
            405,
            405,
        );

        // Lookup of a schema the subject does not hold.
        let other = doc(json!([{"name": "other", "type": "long"}]));
        let got = h
            .send(
                "POST",
                "/subjects/f-value",
                json!({"schema": other.to_string()}),
            )
            .await;
        assert_eq!(got.1["message"], json!("Schema not found"));
        assert_error(got, 404, 40403);

        // The registry's mode: READWRITE, the only one it runs.
        assert_eq!(h.get("/mode").await.1, json!({"mode": "READWRITE"}));
        assert_error(
            h.send("PUT", "/mode", json!({"mode": "IMPORT"})).await,
            422,
            42204,
        );
        h.finish().await;
    }
}

#[tokio::test]
async fn compatibility_checks_name_real_versions_and_handle_empty_subjects() {
    for h in Harness::all().await {
        let candidate = json!({"schema": v1().to_string()});
        // The gate users run before a subject's first registration.
        let (s, body) = h
            .send(
                "POST",
                "/compatibility/subjects/new-value/versions/latest",
                candidate.clone(),
            )
            .await;
        assert_eq!((s.as_u16(), body), (200, json!({"is_compatible": true})));
        // A specific version of a subject that has none: the version is what is missing.
        assert_error(
            h.send(
                "POST",
                "/compatibility/subjects/new-value/versions/1",
                candidate.clone(),
            )
            .await,
            404,
            40402,
        );

        // Versions 1..3, then 1 and 2 soft-deleted: the one left is version 3, and the
        // reasons say so (not "version 1", its place in what is left).
        let v3 = doc(json!([
            {"name": "id", "type": "string"},
            {"name": "n", "type": ["null", "int"], "default": null},
            {"name": "m", "type": ["null", "int"], "default": null}
        ]));
        for s in [v1(), v2(), v3] {
            assert_eq!(h.register("c-value", &s).await.0, 200);
        }
        h.delete("/subjects/c-value/versions/1").await;
        h.delete("/subjects/c-value/versions/2").await;
        let breaking =
            doc(json!([{"name": "id", "type": "string"}, {"name": "must", "type": "string"}]));
        let (s, body) = h
            .send(
                "POST",
                "/compatibility/subjects/c-value/versions/latest?verbose=true",
                json!({"schema": breaking.to_string()}),
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(body["is_compatible"], json!(false));
        let messages = body["messages"].to_string();
        assert!(
            messages.contains("version 3") && !messages.contains("version 1"),
            "{messages}"
        );
        let got = h.register("c-value", &breaking).await;
        assert!(
            got.1["message"].as_str().unwrap().contains("version 3"),
            "{:?}",
            got.1
        );
        assert_error(got, 409, 409);
        h.finish().await;
    }
}

fn address(extra: Option<Value>) -> Value {
    let mut fields = vec![json!({"name": "street", "type": "string"})];
    fields.extend(extra);
    json!({"type": "record", "name": "Address", "namespace": "io.docflow.test", "fields": fields})
}

fn person() -> Value {
    json!({"type": "record", "name": "Person", "namespace": "io.docflow.test", "fields": [
        {"name": "name", "type": "string"},
        {"name": "home", "type": "io.docflow.test.Address"},
        {"name": "work", "type": ["null", "Address"], "default": null}
    ]})
}

fn with_refs(schema: &Value, version: i64) -> Value {
    json!({
        "schema": schema.to_string(),
        "references": [{"name": "io.docflow.test.Address", "subject": "address", "version": version}]
    })
}

#[tokio::test]
async fn schema_references_are_stored_resolved_and_protected() {
    for h in Harness::all().await {
        // `"references": null` is what some clients send for none.
        let (s, body) = h
            .send(
                "POST",
                "/subjects/address/versions",
                json!({"schema": address(None).to_string(), "references": null}),
            )
            .await;
        assert_eq!(s, 200, "{body}");
        let address_id = body["id"].as_i64().unwrap();

        // Without its reference the schema does not parse; with it, it registers.
        assert_error(h.register("person-value", &person()).await, 422, 42201);
        let (s, body) = h
            .send(
                "POST",
                "/subjects/person-value/versions",
                with_refs(&person(), 1),
            )
            .await;
        assert_eq!(s, 200, "{body}");
        let person_id = body["id"].as_i64().unwrap();
        assert_ne!(person_id, address_id);
        // A reference to a version that does not exist.
        assert_error(
            h.send(
                "POST",
                "/subjects/p2-value/versions",
                with_refs(&person(), 9),
            )
            .await,
            422,
            42201,
        );

        // Returned where the schema is returned.
        let want = json!([{"name": "io.docflow.test.Address", "subject": "address", "version": 1}]);
        let (_, by_id) = h.get(&format!("/schemas/ids/{person_id}")).await;
        assert_eq!(by_id["references"], want);
        let (_, version) = h.get("/subjects/person-value/versions/1").await;
        assert_eq!(version["references"], want);
        assert!(
            h.get(&format!("/schemas/ids/{address_id}"))
                .await
                .1
                .get("references")
                .is_none()
        );
        assert_eq!(
            h.get("/subjects/address/versions/1/referencedby").await.1,
            json!([person_id])
        );
        // Lookup and re-registration find it (identity includes the references).
        let (s, found) = h
            .send("POST", "/subjects/person-value", with_refs(&person(), 1))
            .await;
        assert_eq!((s.as_u16(), &found["id"]), (200, &json!(person_id)));
        let (_, again) = h
            .send(
                "POST",
                "/subjects/person-value/versions",
                with_refs(&person(), 1),
            )
            .await;
        assert_eq!(again["id"], json!(person_id));

        // Compatibility sees through references: Address v2 adds a required field; a
        // Person that takes it cannot read Person v1 data.
        h.send("PUT", "/config/address", json!({"compatibility": "NONE"}))
            .await;
        let zip = json!({"name": "zip", "type": "string"});
        assert_eq!(h.register("address", &address(Some(zip))).await.0, 200);
        let (s, body) = h
            .send(
                "POST",
                "/compatibility/subjects/person-value/versions/latest?verbose=true",
                with_refs(&person(), 2),
            )
            .await;
        assert_eq!(s, 200);
        assert_eq!(body["is_compatible"], json!(false), "{body}");
        assert!(body["messages"].to_string().contains("version 1"), "{body}");
        assert_error(
            h.send(
                "POST",
                "/subjects/person-value/versions",
                with_refs(&person(), 2),
            )
            .await,
            409,
            409,
        );
        // With a default the change is compatible, through the reference as well.
        let zip = json!({"name": "zip", "type": "string", "default": ""});
        assert_eq!(h.register("address", &address(Some(zip))).await.0, 200);
        let (s, body) = h
            .send(
                "POST",
                "/subjects/person-value/versions",
                with_refs(&person(), 3),
            )
            .await;
        assert_eq!(s, 200, "{body}");

        // A referenced version cannot be deleted while a schema uses it.
        assert_error(h.delete("/subjects/address/versions/1").await, 422, 42206);
        assert_error(h.delete("/subjects/address").await, 422, 42206);
        // Once the referrer is gone (soft), a soft delete goes through; a permanent one
        // waits until the referrer is permanently gone too.
        assert_eq!(h.delete("/subjects/person-value/versions/1").await.0, 200);
        assert_eq!(h.delete("/subjects/address/versions/1").await.0, 200);
        assert_error(
            h.delete("/subjects/address/versions/1?permanent=true")
                .await,
            422,
            42206,
        );
        assert_eq!(
            h.delete("/subjects/person-value/versions/1?permanent=true")
                .await
                .0,
            200
        );
        assert_eq!(
            h.delete("/subjects/address/versions/1?permanent=true")
                .await
                .0,
            200
        );
        h.finish().await;
    }
}

#[tokio::test]
async fn content_negotiation_and_charsets() {
    let h = Harness::start(ScratchDb::sqlite().unwrap()).await;
    let get = |accept: &'static str| {
        h.http
            .get(h.url("/subjects"))
            .header("accept", accept)
            .send()
    };
    let (s, ct, _) = raw(get("application/json").await.unwrap()).await;
    assert_eq!((s.as_u16(), ct.as_str()), (200, "application/json"));
    for accept in [
        "application/vnd.schemaregistry.v1+json",
        "*/*",
        "application/*",
        "text/html;q=0.9, application/vnd.schemaregistry.v1+json",
    ] {
        let (s, ct, _) = raw(get(accept).await.unwrap()).await;
        assert_eq!(
            (s.as_u16(), ct.as_str()),
            (200, "application/vnd.schemaregistry.v1+json"),
            "{accept}"
        );
    }
    let (s, ct, body) = raw(get("text/html").await.unwrap()).await;
    assert_eq!(s.as_u16(), 406);
    assert_eq!(ct, "application/vnd.schemaregistry.v1+json");
    assert_eq!(body["error_code"], json!(406));
    // Errors follow the negotiated type as well.
    let r = h
        .http
        .get(h.url("/subjects/none/versions"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    let (s, ct, body) = raw(r).await;
    assert_eq!((s.as_u16(), ct.as_str()), (404, "application/json"));
    assert_eq!(body["error_code"], json!(40401));

    // A Latin-1 body (an é in the doc) is decoded; a charset this registry cannot read is a
    // 415, not a parse error.
    let schema = r#"{"type":"record","name":"L","doc":"café","fields":[]}"#;
    let text = json!({"schema": schema}).to_string();
    assert!(text.contains('é'));
    let latin1: Vec<u8> = text
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap())
        .collect();
    let post = |ct: &'static str, body: Vec<u8>| {
        h.http
            .post(h.url("/subjects/latin-value/versions"))
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let (s, _, body) = raw(post("application/json; charset=ISO-8859-1", latin1.clone())
        .await
        .unwrap())
    .await;
    assert_eq!(s, 200, "{body}");
    let (_, _, stored) = raw(h
        .http
        .get(h.url("/subjects/latin-value/versions/1"))
        .send()
        .await
        .unwrap())
    .await;
    assert!(stored["schema"].as_str().unwrap().contains("café"));
    let (s, _, body) = raw(post("application/json; charset=utf-16", latin1)
        .await
        .unwrap())
    .await;
    assert_eq!((s.as_u16(), &body["error_code"]), (415, &json!(415)));
    h.finish().await;
}

/// PostgreSQL that refuses connections (the database closed to connections, then dropped)
/// is an outage: 503 with Retry-After, not a 500. Needs DATABASE_URL (CI sets it).
#[tokio::test]
async fn a_database_that_refuses_connections_is_503() {
    let Ok(admin_url) = std::env::var("DATABASE_URL") else {
        eprintln!("DATABASE_URL not set: PostgreSQL refusal not tested here");
        return;
    };
    let admin = docflow_store::connect(&admin_url, 1).await.unwrap();
    let name = format!("refuse_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    let base = admin_url.rsplit_once('/').unwrap().0;
    let registry = docflow_stack::EmbeddedRegistry::start(&format!("{base}/{name}"))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/subjects", registry.url());
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);

    let kick =
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'");
    let steps = [
        format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"),
        format!("DROP DATABASE {name} WITH (FORCE)"),
    ];
    for step in steps {
        sqlx::query(&step).execute(&admin).await.unwrap();
        sqlx::query(&kick).execute(&admin).await.unwrap();
        // The first request may meet a connection the server closed (I/O); the ones
        // after it meet the refusal itself (55000, then 3D000).
        for _ in 0..3 {
            let r = http.get(&url).send().await.unwrap();
            assert!(r.headers().get("retry-after").is_some(), "{step}");
            let (s, _, body) = raw(r).await;
            assert_eq!(s.as_u16(), 503, "{step}: {body}");
            assert_eq!(body["error_code"], json!(50001));
        }
    }
    registry.stop().await;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
        .execute(&admin)
        .await
        .unwrap();
}
