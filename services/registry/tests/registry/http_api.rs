use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Harness, assert_error, record};

fn v1() -> Value {
    record("Doc", json!([{"name": "id", "type": "string"}]))
}

fn v2() -> Value {
    record(
        "Doc",
        json!([{"name": "id", "type": "string"}, {"name": "pages", "type": ["null", "int"], "default": null}]),
    )
}

#[tokio::test]
async fn register_lookup_and_ids() {
    for h in Harness::all().await {
        let label = format!("{:?}", h.db.backend());
        let (s, body) = h.register("docs-value", &v1()).await;
        assert_eq!(s, 200, "{label}: {body}");
        let id1 = body["id"].as_i64().unwrap();

        // Re-register: same id, no new version, even with other whitespace and key order.
        let reordered =
            r#"{ "fields": [{"type": "string", "name": "id"}], "name": "Doc", "type": "record" }"#;
        let (_, body) = h
            .send(
                "POST",
                "/subjects/docs-value/versions",
                json!({"schema": reordered}),
            )
            .await;
        assert_eq!(body["id"].as_i64(), Some(id1), "{label}");
        assert_eq!(
            h.get("/subjects/docs-value/versions").await.1,
            json!([1]),
            "{label}"
        );

        // Same schema, other subject: same id.
        let (_, body) = h.register("other-value", &v1()).await;
        assert_eq!(body["id"].as_i64(), Some(id1), "{label}");

        // New compatible version.
        let (s, body) = h.register("docs-value", &v2()).await;
        assert_eq!(s, 200, "{label}: {body}");
        let id2 = body["id"].as_i64().unwrap();
        assert_ne!(id1, id2);

        let (s, latest) = h.get("/subjects/docs-value/versions/latest").await;
        assert_eq!(s, 200);
        assert_eq!(latest["version"], json!(2), "{label}");
        assert_eq!(latest["id"], json!(id2));
        assert_eq!(latest["subject"], json!("docs-value"));
        let (_, by_minus_one) = h.get("/subjects/docs-value/versions/-1").await;
        assert_eq!(by_minus_one, latest);
        let (_, first) = h.get("/subjects/docs-value/versions/1").await;
        assert_eq!(first["id"], json!(id1));

        let (s, by_id) = h.get(&format!("/schemas/ids/{id2}")).await;
        assert_eq!(s, 200);
        let parsed: Value = serde_json::from_str(by_id["schema"].as_str().unwrap()).unwrap();
        assert_eq!(parsed, v2());
        let (s, raw) = h.get(&format!("/schemas/ids/{id1}/schema")).await;
        assert_eq!(s, 200);
        assert_eq!(raw, v1());

        let (_, pairs) = h.get(&format!("/schemas/ids/{id1}/versions")).await;
        assert_eq!(
            pairs,
            json!([{"subject": "docs-value", "version": 1}, {"subject": "other-value", "version": 1}])
        );
        assert_eq!(
            h.get(&format!("/schemas/ids/{id1}/subjects")).await.1,
            json!(["docs-value", "other-value"])
        );
        assert_eq!(
            h.get("/subjects").await.1,
            json!(["docs-value", "other-value"])
        );
        assert_eq!(h.get("/schemas/types").await.1, json!(["AVRO"]));

        // Lookup.
        let (s, found) = h
            .send(
                "POST",
                "/subjects/docs-value",
                json!({"schema": v1().to_string()}),
            )
            .await;
        assert_eq!(s, 200, "{label}: {found}");
        assert_eq!(found["version"], json!(1));
        assert_eq!(found["id"], json!(id1));
        let unknown = record("Doc", json!([{"name": "zzz", "type": "long"}]));
        assert_error(
            h.send(
                "POST",
                "/subjects/docs-value",
                json!({"schema": unknown.to_string()}),
            )
            .await,
            404,
            40403,
        );
        assert_error(
            h.send(
                "POST",
                "/subjects/nope",
                json!({"schema": v1().to_string()}),
            )
            .await,
            404,
            40401,
        );
        h.finish().await;
    }
}

#[tokio::test]
async fn confluent_error_codes() {
    for h in Harness::all().await {
        h.register("s-value", &v1()).await;
        assert_error(h.get("/subjects/missing/versions").await, 404, 40401);
        assert_error(h.get("/subjects/missing/versions/1").await, 404, 40401);
        assert_error(h.get("/subjects/s-value/versions/7").await, 404, 40402);
        assert_error(h.get("/subjects/s-value/versions/0").await, 422, 42202);
        assert_error(h.get("/subjects/s-value/versions/abc").await, 422, 42202);
        assert_error(
            h.get("/subjects/s-value/versions/2147483648").await,
            422,
            42202,
        );
        assert_error(h.get("/schemas/ids/999").await, 404, 40403);
        assert_error(h.get("/schemas/ids/0").await, 404, 40403);
        assert_error(h.get("/schemas/ids/-1").await, 404, 40403);
        // Not an id at all: Confluent's (and Karapace's) JAX-RS answer, 404 / 404.
        for path in [
            "/schemas/ids/x",
            "/schemas/ids/2147483648",
            "/schemas/ids/abc/schema",
            "/schemas/ids/abc/versions",
            "/schemas/ids/abc/subjects",
        ] {
            let got = h.get(path).await;
            assert_eq!(
                got,
                (
                    StatusCode::NOT_FOUND,
                    json!({"error_code": 404, "message": "HTTP 404 Not Found"})
                ),
                "{path}"
            );
        }

        // Invalid schemas.
        assert_error(
            h.send(
                "POST",
                "/subjects/s-value/versions",
                json!({"schema": "{not json"}),
            )
            .await,
            422,
            42201,
        );
        assert_error(
            h.send(
                "POST",
                "/subjects/s-value/versions",
                json!({"schema": r#"{"type":"record","name":"R","fields":[{"name":"a","type":"nosuchtype"}]}"#}),
            )
            .await,
            422,
            42201,
        );
        assert_error(
            h.send(
                "POST",
                "/subjects/s-value/versions",
                json!({"schema": "{}", "schemaType": "PROTOBUF"}),
            )
            .await,
            422,
            42201,
        );
        // Not the request shape at all.
        assert_error(
            h.send("POST", "/subjects/s-value/versions", json!({"wrong": 1}))
                .await,
            422,
            422,
        );

        // Incompatible under the default BACKWARD: a new required field.
        let breaking = record(
            "Doc",
            json!([{"name": "id", "type": "string"}, {"name": "must", "type": "string"}]),
        );
        let got = h.register("s-value", &breaking).await;
        assert!(
            got.1["message"].as_str().unwrap().contains("version 1"),
            "{:?}",
            got.1
        );
        assert_error(got, 409, 409);

        // Levels.
        assert_eq!(
            h.get("/config").await.1,
            json!({"compatibilityLevel": "BACKWARD"})
        );
        assert_error(
            h.send("PUT", "/config", json!({"compatibility": "SIDEWAYS"}))
                .await,
            422,
            42203,
        );
        assert_error(h.get("/config/s-value").await, 404, 40408);
        assert_eq!(
            h.get("/config/s-value?defaultToGlobal=true").await.1,
            json!({"compatibilityLevel": "BACKWARD"})
        );
        let (s, body) = h
            .send("PUT", "/config/s-value", json!({"compatibility": "NONE"}))
            .await;
        assert_eq!((s.as_u16(), body), (200, json!({"compatibility": "NONE"})));
        assert_eq!(
            h.get("/config/s-value").await.1,
            json!({"compatibilityLevel": "NONE"})
        );
        // Now the breaking schema registers.
        let (s, _) = h.register("s-value", &breaking).await;
        assert_eq!(s, 200);
        let (s, body) = h
            .send(
                "PUT",
                "/config",
                json!({"compatibility": "full_transitive"}),
            )
            .await;
        assert_eq!(
            (s.as_u16(), body),
            (200, json!({"compatibility": "FULL_TRANSITIVE"}))
        );
        assert_eq!(
            h.get("/config").await.1,
            json!({"compatibilityLevel": "FULL_TRANSITIVE"})
        );
        assert_eq!(
            h.delete("/config/s-value").await.1,
            json!({"compatibilityLevel": "NONE"})
        );
        // Deleting a level that is not there: Confluent answers 40401 (a read: 40408).
        assert_error(h.delete("/config/s-value").await, 404, 40401);
        h.finish().await;
    }
}

#[tokio::test]
async fn deletes_keep_ids_and_versions_increase() {
    for h in Harness::all().await {
        let id1 = h.register("d-value", &v1()).await.1["id"].as_i64().unwrap();
        let id2 = h.register("d-value", &v2()).await.1["id"].as_i64().unwrap();

        // Permanent before soft: refused.
        assert_error(
            h.delete("/subjects/d-value/versions/2?permanent=true")
                .await,
            404,
            40407,
        );
        // Soft delete of the latest version.
        let (s, body) = h.delete("/subjects/d-value/versions/latest").await;
        assert_eq!((s.as_u16(), body), (200, json!(2)));
        assert_error(h.delete("/subjects/d-value/versions/2").await, 404, 40406);
        assert_eq!(h.get("/subjects/d-value/versions").await.1, json!([1]));
        assert_eq!(
            h.get("/subjects/d-value/versions?deleted=true").await.1,
            json!([1, 2])
        );
        assert_error(h.get("/subjects/d-value/versions/2").await, 404, 40402);
        assert_eq!(
            h.get("/subjects/d-value/versions/2?deleted=true").await.1["id"],
            json!(id2)
        );
        // A soft-deleted schema is still fetchable by id (old records stay decodable).
        let (s, _) = h.get(&format!("/schemas/ids/{id2}")).await;
        assert_eq!(s, 200);

        // Registering it again makes a new version: 3, never a reused 2; same id.
        let (_, body) = h.register("d-value", &v2()).await;
        assert_eq!(body["id"], json!(id2));
        assert_eq!(h.get("/subjects/d-value/versions").await.1, json!([1, 3]));

        // Permanent delete of the soft-deleted version 2.
        let (s, body) = h
            .delete("/subjects/d-value/versions/2?permanent=true")
            .await;
        assert_eq!((s.as_u16(), body), (200, json!(2)));
        assert_eq!(
            h.get("/subjects/d-value/versions?deleted=true").await.1,
            json!([1, 3])
        );

        // Subject deletes.
        assert_error(
            h.delete("/subjects/d-value?permanent=true").await,
            404,
            40405,
        );
        let (s, body) = h.delete("/subjects/d-value").await;
        assert_eq!((s.as_u16(), body), (200, json!([1, 3])));
        assert_error(h.delete("/subjects/d-value").await, 404, 40404);
        assert_eq!(h.get("/subjects").await.1, json!([]));
        assert_eq!(h.get("/subjects?deleted=true").await.1, json!(["d-value"]));
        assert_error(h.get("/subjects/d-value/versions").await, 404, 40401);
        let (s, _) = h.get(&format!("/schemas/ids/{id1}")).await;
        assert_eq!(s, 200, "soft-deleted subject's ids still resolve");

        let (s, body) = h.delete("/subjects/d-value?permanent=true").await;
        assert_eq!((s.as_u16(), body), (200, json!([1, 3])));
        assert_error(h.get(&format!("/schemas/ids/{id1}")).await, 404, 40403);
        assert_error(h.delete("/subjects/d-value").await, 404, 40401);

        // After a permanent delete the subject starts again above its old versions, and the
        // schema keeps its id.
        let (_, body) = h.register("d-value", &v1()).await;
        assert_eq!(body["id"], json!(id1));
        assert_eq!(h.get("/subjects/d-value/versions").await.1, json!([4]));
        h.finish().await;
    }
}

#[tokio::test]
async fn compatibility_endpoint_and_vectors() {
    let vectors: Value =
        serde_json::from_str(include_str!("../../../../schemas/compat/vectors.json")).unwrap();
    for h in Harness::all().await {
        let label = format!("{:?}", h.db.backend());
        for (i, case) in vectors["cases"].as_array().unwrap().iter().enumerate() {
            let subject = format!("vec{i}-value");
            h.send(
                "PUT",
                &format!("/config/{subject}"),
                json!({"compatibility": "NONE"}),
            )
            .await;
            for old in case["old"].as_array().unwrap() {
                let (s, b) = h.register(&subject, old).await;
                assert_eq!(s, 200, "{label} {}: {b}", case["name"]);
            }
            h.send(
                "PUT",
                &format!("/config/{subject}"),
                json!({"compatibility": case["level"]}),
            )
            .await;
            let want = case["compatible"].as_bool().unwrap();
            let (s, body) = h
                .send(
                    "POST",
                    &format!("/compatibility/subjects/{subject}/versions?verbose=true"),
                    json!({"schema": case["new"].to_string()}),
                )
                .await;
            assert_eq!(s, 200);
            assert_eq!(
                body["is_compatible"],
                json!(want),
                "{label} {}: {body}",
                case["name"]
            );
            assert_eq!(body["messages"].as_array().unwrap().is_empty(), want);
            let (s, body) = h.register(&subject, &case["new"]).await;
            assert_eq!(
                s.as_u16(),
                if want { 200 } else { 409 },
                "{label} {}: {body}",
                case["name"]
            );
        }

        // Against one version, not verbose.
        h.register("c-value", &v1()).await;
        let breaking = record(
            "Doc",
            json!([{"name": "id", "type": "string"}, {"name": "must", "type": "string"}]),
        );
        let (s, body) = h
            .send(
                "POST",
                "/compatibility/subjects/c-value/versions/1",
                json!({"schema": breaking.to_string()}),
            )
            .await;
        assert_eq!((s.as_u16(), body), (200, json!({"is_compatible": false})));
        let (_, body) = h
            .send(
                "POST",
                "/compatibility/subjects/c-value/versions/latest",
                json!({"schema": v2().to_string()}),
            )
            .await;
        assert_eq!(body, json!({"is_compatible": true}));
        assert_error(
            h.send(
                "POST",
                "/compatibility/subjects/c-value/versions/9",
                json!({"schema": v2().to_string()}),
            )
            .await,
            404,
            40402,
        );
        h.finish().await;
    }
}

#[tokio::test]
async fn content_types() {
    let h = Harness::start(docflow_store::scratch::ScratchDb::sqlite().unwrap()).await;
    let body = json!({"schema": v1().to_string()}).to_string();
    for ct in [
        "application/vnd.schemaregistry.v1+json",
        "application/vnd.schemaregistry+json",
        "application/json",
        "application/json; charset=utf-8",
    ] {
        let r = h
            .http
            .post(h.url("/subjects/ct-value/versions"))
            .header("content-type", ct)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{ct}");
    }
    let r = h
        .http
        .post(h.url("/subjects/ct-value/versions"))
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error_code"], json!(415));
    h.finish().await;
}

#[tokio::test]
async fn storage_unavailable_is_503() {
    for h in Harness::all().await {
        h.register("u-value", &v1()).await;
        h.registry.store().pool().close().await;
        let (s, body) = h.get("/subjects/u-value/versions").await;
        assert_eq!(s.as_u16(), 503, "{body}");
        assert_eq!(body["error_code"], json!(50001));
        let r = h.http.get(h.url("/schemas/ids/1")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert!(r.headers().get("retry-after").is_some());
        let (s, _) = h.register("u-value", &v2()).await;
        assert_eq!(s.as_u16(), 503);
        h.finish().await;
    }
}

/// Concurrent registrations of distinct schemas get distinct ids and versions 1..=N.
#[tokio::test]
async fn concurrent_registrations() {
    for h in Harness::all().await {
        let h = std::sync::Arc::new(h);
        let mut tasks = Vec::new();
        for i in 0..16 {
            let h = h.clone();
            tasks.push(tokio::spawn(async move {
                let schema = record(
                    "Doc",
                    json!([{"name": "id", "type": "string"}, {"name": format!("f{i}"), "type": ["null", "int"], "default": null}]),
                );
                let (s, body) = h.register("conc-value", &schema).await;
                assert_eq!(s, 200, "{body}");
                body["id"].as_i64().unwrap()
            }));
        }
        let mut ids = Vec::new();
        for t in tasks {
            ids.push(t.await.unwrap());
        }
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 16);
        let versions = h.get("/subjects/conc-value/versions").await.1;
        assert_eq!(versions, json!((1..=16).collect::<Vec<_>>()));
        let h = std::sync::Arc::into_inner(h).unwrap();
        h.finish().await;
    }
}
