use docflow_stack::EmbeddedRegistry;
use docflow_store::scratch::ScratchDb;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A registry over one scratch database.
pub struct Harness {
    pub registry: EmbeddedRegistry,
    pub db: ScratchDb,
    pub http: reqwest::Client,
}

impl Harness {
    pub async fn start(db: ScratchDb) -> Self {
        let registry = EmbeddedRegistry::start(&db.url).await.unwrap();
        Harness {
            registry,
            db,
            http: reqwest::Client::new(),
        }
    }

    /// One harness per available backend.
    pub async fn all() -> Vec<Self> {
        let mut out = Vec::new();
        for db in ScratchDb::all().await.unwrap() {
            out.push(Self::start(db).await);
        }
        out
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.registry.url())
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self.http.get(self.url(path)).send().await.unwrap();
        split(r).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let r = self.http.delete(self.url(path)).send().await.unwrap();
        split(r).await
    }

    pub async fn send(&self, method: &str, path: &str, body: Value) -> (StatusCode, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = self
            .http
            .request(m, self.url(path))
            .header("content-type", "application/vnd.schemaregistry.v1+json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        split(r).await
    }

    pub async fn register(&self, subject: &str, schema: &Value) -> (StatusCode, Value) {
        self.send(
            "POST",
            &format!("/subjects/{subject}/versions"),
            json!({"schema": schema.to_string()}),
        )
        .await
    }

    pub async fn finish(self) {
        let label = format!("{:?}", self.db.backend());
        self.registry.stop().await;
        self.db
            .drop_now()
            .await
            .unwrap_or_else(|e| panic!("{label}: {e}"));
    }
}

async fn split(r: reqwest::Response) -> (StatusCode, Value) {
    let (status, ct, v) = raw(r).await;
    assert_eq!(ct, "application/vnd.schemaregistry.v1+json", "content type");
    (status, v)
}

/// A response's status, content type and body (JSON when it parses, else the text).
pub async fn raw(r: reqwest::Response) -> (StatusCode, String, Value) {
    let status = r.status();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    (
        status,
        ct,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub fn record(name: &str, fields: Value) -> Value {
    json!({"type": "record", "name": name, "fields": fields})
}

/// Asserts a Confluent error body.
pub fn assert_error(got: (StatusCode, Value), status: u16, code: u64) {
    assert_eq!(got.0.as_u16(), status, "{:?}", got.1);
    assert_eq!(got.1["error_code"], json!(code), "{:?}", got.1);
    assert!(got.1["message"].as_str().is_some_and(|m| !m.is_empty()));
}
