//! The operators' console in a real browser: Debian's Chromium, headless, driven over W3C
//! WebDriver (Debian's chromedriver, both installed by `make tools`) against a live stack —
//! broker, registry, database, ingest and the thumbnails stage. The page loads behind its
//! admin token (a tenant's token is refused), shows the group and its members, the lag chart
//! rises while the stage is stopped and falls after it restarts, a dead-lettered upload
//! appears in the DLQ list and the redrive button sends it back, and a job's page shows its
//! stages, thumbnail, summary and text (the ocr-embeddings stage runs too). Screenshots go to `bench/results/console/`.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use docflow_events::document_id;
use docflow_events::stages::{OCR_EMBEDDINGS, THUMBNAILS};
use docflow_stack::{free_port, pdf::text_pdf};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Stack, TOKEN};

const ADMIN: &str = "tok-operator";

/// `DOCFLOW_CHROMIUM` / `DOCFLOW_CHROMEDRIVER`, else Debian's paths.
fn program(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: `make tools` installs Debian's chromium and chromium-driver \
         (scripts/install-browser.sh), or set {env}",
        path.display()
    );
    path
}

/// A headless Chromium session over WebDriver.
struct Browser {
    driver: Child,
    url: String,
    session: String,
    http: reqwest::Client,
    shots: PathBuf,
    /// Chromium's profile, removed with the browser.
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    /// Chromedriver and the Chromium it started (its process group), also when the test
    /// failed before `quit`.
    fn drop(&mut self) {
        // `--` before the negative process-group id: without it procps-ng 4.0's kill
        // misreads it (strace: `kill -KILL -999999` calls kill(-9, SIGKILL)), and a group
        // id starting with 1 becomes kill(-1, SIGKILL): every process on the machine, as
        // root. That is what cut test runs short at ~213 of 223 tests.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start() -> Self {
        let chromium = program("DOCFLOW_CHROMIUM", "/usr/bin/chromium");
        let port = free_port().unwrap();
        let driver = Command::new(program("DOCFLOW_CHROMEDRIVER", "/usr/bin/chromedriver"))
            .arg(format!("--port={port}"))
            // Its own process group, so that Drop can end Chromium with it.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("{url}/status")).send().await;
            if let Ok(r) = ready
                && r.json::<Value>()
                    .await
                    .ok()
                    .is_some_and(|v| v["value"]["ready"] == true)
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not start"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1440,1100", "--lang=en-GB",
                         format!("--user-data-dir={}", profile.path().display())],
            },
        }}});
        let created: Value = http
            .post(format!("{url}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {created}"))
            .to_owned();
        let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/results/console");
        std::fs::create_dir_all(&shots).unwrap();
        Browser {
            driver,
            url,
            session,
            http,
            shots,
            _profile: profile,
        }
    }

    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(
            method,
            format!("{}/session/{}{path}", self.url, self.session),
        );
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r: Value = req.send().await.unwrap().json().await.unwrap();
        assert!(
            r["value"].get("error").is_none(),
            "WebDriver {path}: {}",
            r["value"]
        );
        r["value"].clone()
    }

    async fn goto(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body) in the page; its return value.
    async fn eval(&self, script: &str) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Polls `script` until it returns something truthy (not null/false/0/""); that value.
    async fn wait_for(&self, what: &str, script: &str) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.eval(script).await;
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if tokio::time::Instant::now() > deadline {
                let text = self
                    .eval("return document.body.innerText.slice(0, 3000)")
                    .await;
                panic!("the console never showed {what}; the page said:\n{}", text);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn element(&self, css: &str) -> String {
        let e = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        e.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.element(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/clear"),
            Some(json!({})),
        )
        .await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    async fn click(&self, css: &str) {
        let e = self.element(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Clicks the element `css` finds at this moment from inside the page: for parts the
    /// page re-renders every poll, where a WebDriver element reference can go stale between
    /// finding and clicking.
    async fn click_now(&self, css: &str) {
        let css = serde_json::to_string(css).unwrap();
        let clicked = self
            .eval(&format!(
                "const e = document.querySelector({css}); if (!e) return false; e.click(); return true"
            ))
            .await;
        assert_eq!(clicked, json!(true), "nothing to click at {css}");
    }

    /// A screenshot of the page as a user sees it, to `bench/results/console/NAME.png`.
    async fn screenshot(&self, name: &str) {
        let b64 = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }

    async fn quit(self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.url, self.session))
            .send()
            .await;
    }
}

/// A one-page PDF of its own (distinct bytes, distinct job).
fn pdf(n: usize) -> Vec<u8> {
    let line = format!("console test document {n}");
    text_pdf(&[&[line.as_str()]])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_lag_dead_letters_and_jobs_in_a_browser() {
    let mut s = Stack::start_without_stage_with(|c| {
        c.admin_tokens = vec![ADMIN.to_owned()];
        c.stages = vec![THUMBNAILS.to_owned(), OCR_EMBEDDINGS.to_owned()];
        // The lag history the server keeps for the charts, a point every half second.
        c.health.health_interval = Duration::from_millis(500);
    })
    .await;
    s.stack.start_named("thumbnails").await.unwrap();
    s.stack.start_named("ocr-embeddings").await.unwrap();
    let group = s.group.clone();

    // The admin API: an admin token only.
    let get = |token: Option<&'static str>| {
        let req = s.http.get(format!("{}/v1/admin/groups", s.base));
        async move {
            let req = match token {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            let r = req.send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(get(None).await.0, StatusCode::UNAUTHORIZED);
    let (status, body) = get(Some(TOKEN)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "forbidden");
    let (status, body) = get(Some(ADMIN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["groups"][0]["group"], group.as_str(), "{body}");
    assert_eq!(
        body["groups"][1]["group"],
        s.stack.group(OCR_EMBEDDINGS).as_str(),
        "{body}"
    );
    assert_eq!(
        body["groups"][0]["broker"]["partitions"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    let first = pdf(0);
    let first_id = document_id(&first);
    let (status, job) = s.post("?wait=30s&filename=first.pdf", first).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "done", "{job}");

    let b = Browser::start().await;
    b.goto(&format!("{}/console", s.base)).await;
    b.wait_for(
        "the token form",
        "return !document.querySelector('#login').hidden",
    )
    .await;
    // A tenant's token is refused with the reason.
    b.type_into("#token", TOKEN).await;
    b.click("#sign-in").await;
    b.wait_for(
        "the refusal of a tenant's token",
        "return document.querySelector('#login-error').textContent.includes('tenant')",
    )
    .await;
    b.type_into("#token", ADMIN).await;
    b.click("#sign-in").await;
    let card = format!("section.group[data-group='{group}']");
    b.wait_for(
        "the group with its member and its replica's report",
        &format!(
            "return document.querySelector(\"{card}[data-members='1'][data-replicas='1']\") !== null"
        ),
    )
    .await;
    b.wait_for(
        "the first job, done",
        &format!("return document.querySelector(\"tr.job[data-job='{first_id}'][data-pipeline='done']\") !== null"),
    )
    .await;
    let rows = b
        .eval(&format!(
            "return document.querySelectorAll(\"{card} table.partitions tbody tr\").length"
        ))
        .await;
    assert_eq!(rows, json!(3));
    b.screenshot("overview").await;

    // The stage stops (drains, leaves the group): uploads wait, the lag rises on the chart.
    assert!(s.stack.signal_shutdown(THUMBNAILS));
    b.wait_for(
        "the group without members or replica reports (the last one said it left)",
        &format!(
            "return document.querySelector(\"{card}[data-members='0'][data-replicas='0']\") !== null"
        ),
    )
    .await;
    let waiting = 6;
    for n in 1..=waiting {
        let (status, job) = s.post("", pdf(n)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    }
    let lag = |min: usize| {
        format!(
            "const c = document.querySelector(\"{card}\"); \
             const chart = c && c.querySelector('svg.chart.records'); \
             return c && Number(c.dataset.lag) >= {min} && Number(chart.dataset.last) >= {min} \
               && Number(c.querySelector('svg.chart.seconds').dataset.last) > 0"
        )
    };
    b.wait_for("the lag of the waiting uploads", &lag(waiting))
        .await;
    // It keeps rising while the stage is away: the oldest record ages.
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.screenshot("lag-while-stopped").await;

    // The stage comes back: the lag falls to 0, and the chart keeps the peak.
    s.stack.start_named("thumbnails").await.unwrap();
    b.wait_for(
        "the lag falling back to 0 after the restart",
        &format!(
            "const c = document.querySelector(\"{card}[data-members='1']\"); \
             const chart = c && c.querySelector('svg.chart.records'); \
             return c && c.dataset.lag === '0' && chart.dataset.last === '0' \
               && Number(chart.dataset.peak) >= {waiting}"
        ),
    )
    .await;
    b.screenshot("lag-after-restart").await;
    // Every line has its legend entry: the total and each partition.
    let legend = b
        .eval(&format!(
            "const c = document.querySelector(\"{card}\"); \
             return [c.querySelectorAll('svg.chart.records polyline').length, \
                     c.querySelectorAll('svg.chart.records + .legend .legend-item').length]"
        ))
        .await;
    assert_eq!(legend, json!([4, 4]));
    // A page opened now draws the backlog it never saw: the server kept the lag.
    b.goto(&format!("{}/console", s.base)).await;
    b.wait_for(
        "the backlog, drawn from the server's history by a freshly opened page",
        &format!(
            "const c = document.querySelector(\"{card}\"); \
             const chart = c && c.querySelector('svg.chart.records'); \
             return c && Number(chart.dataset.peak) >= {waiting} && chart.dataset.last === '0'"
        ),
    )
    .await;
    // The hour's range keeps it too.
    b.click_now("button.range[data-range='3600']").await;
    b.wait_for(
        "the 1 h range",
        &format!(
            "const c = document.querySelector(\"{card}\"); \
             return document.querySelector(\"button.range.on[data-range='3600']\") !== null \
               && Number(c.querySelector('svg.chart.records').dataset.peak) >= {waiting}"
        ),
    )
    .await;
    b.click_now("button.range[data-range='300']").await;

    // An upload the stage cannot render is dead-lettered: it appears in the DLQ list.
    let mut bad = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bad.extend_from_slice(&[0u8; 7]);
    let bad_id = document_id(&bad);
    let (status, job) = s.post("", bad).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let row = format!("{card} tr.dead-letter[data-document='{bad_id}']");
    let class = b
        .wait_for(
            "the dead letter",
            &format!("const r = document.querySelector(\"{row}\"); return r && r.dataset.class"),
        )
        .await;
    assert!(class.as_str().is_some_and(|c| !c.is_empty()), "{class}");
    b.screenshot("dead-letter").await;

    // It is shown as the stage refused it (permanent), with its event decoded.
    let shown = b
        .eval(&format!(
            "const r = document.querySelector(\"{row}\"); \
             return [r.dataset.permanent, r.querySelector('details.payload dl').textContent.includes('{bad_id}')]"
        ))
        .await;
    assert_eq!(shown, json!(["true", true]));

    // Redrive asks first, and warns that the dead letter failed permanently; confirmed, the
    // record goes back for this group, fails again, and is dead-lettered a second time with
    // its redrive count; the first is marked redriven.
    b.click_now(&format!("{card} button.redrive")).await;
    b.wait_for(
        "the confirmation, warning of a permanent failure",
        "return document.querySelector('#confirm').open \
           && document.querySelector('#confirm-text').textContent.includes('1 of the 1 shown failed permanently')",
    )
    .await;
    b.screenshot("redrive-confirm").await;
    b.click_now("#confirm-ok").await;
    b.wait_for(
        "the redrive report",
        &format!(
            "return document.querySelector(\"{card} .redrive-result\").textContent.includes('redriven 1 of 1')"
        ),
    )
    .await;
    b.wait_for(
        "the dead letter of the redriven record",
        &format!(
            "const rows = [...document.querySelectorAll(\"{row}\")]; \
             return rows.length === 2 && rows.some(r => r.innerText.includes('redriven 1× before')) \
               && rows.some(r => r.dataset.handled === 'redriven')"
        ),
    )
    .await;
    b.screenshot("after-redrive").await;

    // Discard the second: it asks who, records it, and nothing is left waiting.
    let waiting = format!("{row}[data-handled='']");
    b.click_now(&format!("{waiting} button.discard")).await;
    b.wait_for(
        "the discard's confirmation, asking who",
        "return document.querySelector('#confirm').open && !document.querySelector('#confirm-name-row').hidden",
    )
    .await;
    b.type_into("#confirm-name", "tester").await;
    b.click_now("#confirm-ok").await;
    b.wait_for(
        "the dead letter discarded by its operator, none waiting",
        &format!(
            "const rows = [...document.querySelectorAll(\"{row}\")]; \
             return rows.length === 2 && rows.some(r => r.dataset.handled === 'discarded' \
               && r.querySelector('td.handled').textContent.startsWith('discarded by tester')) \
               && document.querySelector(\"{card} button.redrive\").disabled"
        ),
    )
    .await;

    // Find a job by its file name (case aside), then by its document id's start.
    b.type_into("#job-query", "FIRST.p\u{E007}").await;
    b.wait_for(
        "the one job whose file name matches",
        &format!(
            "const rows = document.querySelectorAll('tr.job'); \
             return rows.length === 1 && rows[0].dataset.job === '{first_id}' \
               && document.querySelector('#jobs-title').textContent.includes('FIRST.p')"
        ),
    )
    .await;
    b.type_into("#job-query", &format!("{}\u{E007}", &bad_id[..10]))
        .await;
    b.wait_for(
        "the one job whose document id starts so",
        &format!(
            "const rows = document.querySelectorAll('tr.job'); \
             return rows.length === 1 && rows[0].dataset.job === '{bad_id}'"
        ),
    )
    .await;
    b.type_into("#job-query", &format!("{}\u{E007}", &first_id[..12]))
        .await;
    b.wait_for(
        "the first job found by its document id's start",
        &format!(
            "const rows = document.querySelectorAll('tr.job'); \
             return rows.length === 1 && rows[0].dataset.job === '{first_id}'"
        ),
    )
    .await;

    // A job's page: its stages and its thumbnail, loaded with the admin token.
    b.click_now(&format!("tr.job[data-job='{first_id}'] a[href^='#/job/']"))
        .await;
    b.wait_for(
        "the job page with its stages, thumbnail, summary and text",
        "const img = document.querySelector('#thumbnail'); \
         const done = (stage) => { \
           const st = document.querySelector(`table.stages tr[data-stage='${stage}']`); \
           return st && st.dataset.status === 'done'; }; \
         const text = document.querySelector('#text'); \
         return img && img.complete && img.naturalWidth > 0 && done('thumbnails') \
           && done('ocr-embeddings') && text && text.textContent.includes('console test document 0') \
           && document.querySelector('#summary').textContent.includes('console test document 0')",
    )
    .await;
    b.screenshot("job").await;
    b.quit().await;
    s.finish().await;
}
