//! The ocr-embeddings stage: page reading in process (text layers, OCR of generated scans,
//! limits), then end to end over the real broker, registry, database and object store with
//! documents uploaded through the real ingest API and searched through it.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

use std::io::Cursor;
use std::time::Duration;

use docflow_events::stages::OCR_EMBEDDINGS;
use docflow_events::{DocProcessed, EventCodec, document_id, topics};
use docflow_ocr_embeddings::ocr::{Ocr, OcrConfig};
use docflow_ocr_embeddings::pages::{Extracted, Extractor, Limits, PageError};
use docflow_stack::measure::cer;
use docflow_stack::pdf::{image_pdf, text_pdf};
use docflow_stack::{pdfium_library, workspace_root};
use image::{DynamicImage, GrayImage, ImageFormat};
use pdfium_render::prelude::PdfRenderConfig;
use reqwest::StatusCode;
use serde_json::Value;

/// A "scan": the first page of a text PDF rendered at `dpi` in grey, as a printer-scanner
/// would deliver it (no text layer left).
fn scan(lines: &[&str], dpi: f32) -> GrayImage {
    let pdfium =
        docflow_stage::media::pdfium(&pdfium_library()).expect("pdfium (run `make tools`)");
    let bytes = text_pdf(&[lines]);
    let doc = pdfium.load_pdf_from_byte_slice(&bytes, None).unwrap();
    let page = doc.pages().get(0).unwrap();
    let width = (595.0 * dpi / 72.0) as i32;
    let image = page
        .render_with_config(&PdfRenderConfig::new().set_target_width(width))
        .unwrap()
        .as_image()
        .unwrap();
    image.to_luma8()
}

fn png(image: &GrayImage) -> Vec<u8> {
    let mut out = Vec::new();
    DynamicImage::ImageLuma8(image.clone())
        .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
        .unwrap();
    out
}

fn limits() -> Limits {
    Limits {
        max_pages: 10,
        max_page_pixels: 40_000_000,
        max_total_pixels: 100_000_000,
        dpi: 300.0,
        max_side: 2000,
    }
}

fn extractor(limits: Limits) -> Extractor {
    let tools = workspace_root().join(".tools");
    let ocr = Ocr::load(OcrConfig {
        models: tools.join("models/ppocr"),
        runtime: tools.join("lib/libonnxruntime.so"),
        threads: 2,
        max_side: 2000,
        det_strip_pixels: docflow_ocr_embeddings::ocr::DET_STRIP_PIXELS,
        min_confidence: 0.5,
        orientation: true,
        device: docflow_ocr_embeddings::ocr::OcrDevice::Cpu,
    })
    .expect("OCR models and onnxruntime (run `make tools`)");
    Extractor::new(&pdfium_library(), ocr, limits).unwrap()
}

const INVOICE: &[&str] = &[
    "Invoice 2024-0042 from ACME Supplies Ltd.",
    "Amount due: 1,250.00 EUR, payable within 30 days.",
    "Please transfer the amount to the account below.",
    "Late payments are charged interest of 2% per month.",
];

const CONTRACT: &[&str] = &[
    "Service agreement between Northwind and Contoso.",
    "The contract renews automatically every year on 1 March.",
    "Either party may cancel it in writing three months before.",
    "Support requests are answered within two business days.",
];

#[test]
fn a_scanned_page_is_read_back_with_few_errors() {
    let mut x = extractor(limits());
    let page = scan(CONTRACT, 200.0);
    let Extracted {
        pages, ocr_pixels, ..
    } = x.extract(&png(&page)).unwrap();
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].source, "ocr");
    assert_eq!(
        ocr_pixels,
        u64::from(page.width()) * u64::from(page.height())
    );
    let rate = cer(&pages[0].text, &CONTRACT.join("\n"));
    eprintln!("CER {rate:.4}: {:?}", pages[0].text);
    assert!(
        rate < 0.03,
        "character error rate {rate}: {:?}",
        pages[0].text
    );
    // One line of the page per line of text, in order.
    assert_eq!(
        pages[0].text.lines().count(),
        CONTRACT.len(),
        "{:?}",
        pages[0].text
    );
    assert!(pages[0].confidence.unwrap() > 0.9);
}

/// The page kinds of the benchmark, read within a margin of what it measures (0.00 % on
/// each, bench/results/ocr-embed.md): a clean 300 dpi PNG, a 150 dpi JPEG, and a 200 dpi page
/// with ±24 levels of noise skewed by 1°.
#[test]
fn clean_compressed_and_noisy_skewed_scans_are_read() {
    let mut x = extractor(limits());
    let want = CONTRACT.join("\n");
    let jpeg = {
        let mut out = Vec::new();
        DynamicImage::ImageLuma8(scan(CONTRACT, 150.0))
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Jpeg)
            .unwrap();
        out
    };
    for (kind, bytes) in [
        ("clean 300 dpi PNG", png(&scan(CONTRACT, 300.0))),
        ("150 dpi JPEG", jpeg),
        (
            "noisy 200 dpi PNG skewed 1°",
            png(&docflow_stack::pdf::noisy_rotated(
                &scan(CONTRACT, 200.0),
                1.0,
            )),
        ),
    ] {
        let page = x.extract(&bytes).unwrap().pages.remove(0);
        let rate = cer(&page.text, &want);
        eprintln!("{kind}: CER {rate:.4}");
        assert!(
            rate < 0.02,
            "{kind}: character error rate {rate}: {:?}",
            page.text
        );
    }
}

#[test]
fn pdf_pages_use_their_text_layer_and_scans_are_read() {
    let mut x = extractor(limits());
    // Page 1 has a text layer; page 2 is a scan inside a PDF (image only).
    let text = text_pdf(&[INVOICE]);
    let Extracted { pages, .. } = x.extract(&text).unwrap();
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].source, "text_layer");
    assert_eq!(pages[0].confidence, None);
    assert!(
        cer(&pages[0].text, &INVOICE.join("\n")) < 0.01,
        "{:?}",
        pages[0].text
    );

    let scanned = scan(CONTRACT, 150.0);
    let Extracted {
        pages, ocr_pixels, ..
    } = x.extract(&image_pdf(&[&scanned, &scanned])).unwrap();
    assert_eq!(pages.len(), 2);
    assert!(pages.iter().all(|p| p.source == "ocr"), "{pages:?}");
    assert_eq!(pages[1].page, 2);
    // Rasterised at 300 dpi within the 2000-pixel side: 1413 x 2000 per page.
    assert_eq!(ocr_pixels, 2 * 1413 * 2000);
    let rate = cer(&pages[0].text, &CONTRACT.join("\n"));
    assert!(
        rate < 0.03,
        "character error rate {rate}: {:?}",
        pages[0].text
    );
}

#[test]
fn limits_are_enforced_before_any_page_is_rasterised() {
    let scanned = scan(&["a scan"], 50.0);
    let three = image_pdf(&[&scanned, &scanned, &scanned]);
    let mut few_pages = extractor(Limits {
        max_pages: 2,
        ..limits()
    });
    let e = few_pages.extract(&three).unwrap_err();
    assert!(matches!(e, PageError::OverLimits(_)), "{e}");
    assert_eq!(e.class(), "over_limits");
    assert!(e.to_string().contains("3 pages"), "{e}");

    let mut few_pixels = extractor(Limits {
        max_total_pixels: 5_000_000,
        ..limits()
    });
    let e = few_pixels.extract(&three).unwrap_err();
    assert!(e.to_string().contains("to page 2"), "{e}");

    let mut small_images = extractor(Limits {
        max_page_pixels: 100_000,
        ..limits()
    });
    let e = small_images.extract(&png(&scan(&["x"], 72.0))).unwrap_err();
    assert!(matches!(e, PageError::OverLimits(_)), "{e}");

    let e = small_images.extract(b"GIF89a not a page").unwrap_err();
    assert_eq!(e.class(), "unsupported_type");
    let e = small_images.extract(b"%PDF-1.4 truncated").unwrap_err();
    assert_eq!(e.class(), "unreadable");
}

const ALICE: &str = "tok-alice";
const BOB: &str = "tok-bob";

async fn get(http: &reqwest::Client, url: String, token: &str) -> (StatusCode, Value) {
    let r = http.get(url).bearer_auth(token).send().await.unwrap();
    (r.status(), r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_are_read_embedded_summarised_and_searchable() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut stack = docflow_stack::Stack::builder()
        .partitions(2)
        .token(ALICE, "alice")
        .token(BOB, "bob")
        // `?wait=` waits for this stage only (it starts after the stack, with its limits).
        .ingest_with(|c| c.stages = vec![OCR_EMBEDDINGS.to_owned()])
        .start()
        .await
        .unwrap();
    stack
        .start_stage::<docflow_ocr_embeddings::OcrEmbeddings>(|c| {
            c.read.max_pages = 3;
            c.max_chunks = 4;
        })
        .await
        .unwrap();
    let base = stack.ingest_url().to_owned();
    let http = reqwest::Client::new();
    let upload = |bytes: Vec<u8>| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .post(format!("{base}/v1/documents?wait=60s"))
                .bearer_auth(ALICE)
                .body(bytes)
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };

    // A PDF with a text layer and a scan (PNG), read and embedded.
    let invoice = text_pdf(&[INVOICE, &["Thank you for your business."]]);
    let contract = png(&scan(CONTRACT, 200.0));
    let (status, job) = upload(invoice.clone()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "done", "{job}");
    let stage = &job["stages"][0];
    assert_eq!(stage["stage"], OCR_EMBEDDINGS);
    assert_eq!(stage["output"]["pages"], 2, "{job}");
    assert_eq!(stage["output"]["ocr_pages"], 0, "{job}");
    assert_eq!(job["pages"][0]["source"], "text_layer", "{job}");
    assert!(job["pages"][0].get("layout").is_none(), "{job}");
    assert!(
        job["text"]
            .as_str()
            .unwrap()
            .contains("Amount due: 1,250.00 EUR"),
        "{job}"
    );
    let summary = job["summary"].as_str().unwrap();
    assert!(
        !summary.is_empty()
            && job["text"]
                .as_str()
                .unwrap()
                .contains(summary.split(". ").next().unwrap()),
        "{job}"
    );

    let (status, job) = upload(contract.clone()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pages"][0]["source"], "ocr", "{job}");
    assert!(
        job["pages"][0]["confidence"].as_f64().unwrap() > 0.9,
        "{job}"
    );
    // Each line's box on the page image, for highlighting: the scan's size, upright, the
    // contract's four lines top to bottom, each box on the image.
    let layout = &job["pages"][0]["layout"];
    let scanned = scan(CONTRACT, 200.0);
    assert_eq!(layout["width"], scanned.width(), "{layout}");
    assert_eq!(layout["height"], scanned.height(), "{layout}");
    assert_eq!(layout["rotation"], 0, "{layout}");
    assert_eq!(layout["unread_boxes"], 0, "{layout}");
    let lines = layout["lines"].as_array().unwrap();
    assert_eq!(lines.len(), CONTRACT.len(), "{layout}");
    let tops: Vec<f64> = lines
        .iter()
        .map(|l| l["quad"][0][1].as_f64().unwrap())
        .collect();
    assert!(tops.windows(2).all(|w| w[0] < w[1]), "{tops:?}");
    assert!(
        lines[1]["text"].as_str().unwrap().contains("renews")
            && lines[1]["confidence"].as_f64().unwrap() > 0.9,
        "{layout}"
    );
    assert!(
        job["text"]
            .as_str()
            .unwrap()
            .contains("renews automatically"),
        "{job}"
    );

    // Search by meaning, not by words: neither query shares its key words with the answer.
    for (q, want) in [
        ("how much money is owed and when", document_id(&invoice)),
        ("when is the deal extended", document_id(&contract)),
    ] {
        let (status, body) = get(&http, format!("{base}/v1/search?q={q}&k=3"), ALICE).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            body["results"][0]["document_id"],
            want.as_str(),
            "{q}: {body}"
        );
        assert!(
            body["results"][0]["score"].as_f64().unwrap() > 0.3,
            "{body}"
        );
    }
    // Another tenant finds nothing of alice's; bad queries are 400 with a reason.
    let (status, body) = get(&http, format!("{base}/v1/search?q=invoice"), BOB).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["results"], Value::Array(Vec::new()), "{body}");
    for bad in ["", "?q=", "?q=x&k=0", "?q=x&k=1000", "?q=x&k=many"] {
        let (status, body) = get(&http, format!("{base}/v1/search{bad}"), ALICE).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }

    // Over the page limit: dead-lettered with its class, the job says why.
    let long = text_pdf(&[INVOICE, INVOICE, INVOICE, INVOICE]);
    let (status, job) = upload(long.clone()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "failed", "{job}");
    assert!(
        job["stages"][0]["error"]
            .as_str()
            .unwrap()
            .contains("4 pages"),
        "{job}"
    );
    let dlq = topics::dead_letter(&stack.topics.uploaded, &stack.group(OCR_EMBEDDINGS));
    let dead = stack
        .records_with_header(&dlq, "docflow.dlq.error.class")
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0.0, document_id(&long).as_bytes());
    assert_eq!(dead[0].1.as_deref(), Some("over_limits"));

    // Over the chunk limit (4 here): refused before anything is embedded, with the figures.
    let sentences: Vec<String> = (0..40)
        .map(|i| format!("Sentence {i} of the quarterly report lists revenue, costs and staff."))
        .collect();
    let page: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let wordy = text_pdf(&[&page, &page, &page]);
    let (status, job) = upload(wordy.clone()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "failed", "{job}");
    let error = job["stages"][0]["error"].as_str().unwrap();
    assert!(error.contains("over 4 chunks (--max-chunks)"), "{job}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let dead = loop {
        let dead = stack
            .records_with_header(&dlq, "docflow.dlq.error.class")
            .await
            .unwrap();
        if dead.len() >= 2 || tokio::time::Instant::now() > deadline {
            break dead;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[1].0.0, document_id(&wordy).as_bytes());
    assert_eq!(dead[1].1.as_deref(), Some("over_limits"));

    // Every document announced once on doc.processed, by this stage.
    let processed = stack
        .wait_records(&stack.topics.processed, 4, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(processed.len(), 4);
    let codec = EventCodec::from_url(&stack.registry.url(), Duration::from_secs(5)).unwrap();
    for (_, value) in &processed {
        let ev: DocProcessed = codec.decode(value).await.unwrap();
        assert_eq!(ev.stage, OCR_EMBEDDINGS);
    }
    stack.stop().await.unwrap();
}

/// The stage as its own process (the real binary) in `stack`, the tools under `.tools`,
/// two workers, then `extra` arguments.
fn stage_process(stack: &docflow_stack::Stack, extra: &[&str]) -> std::process::Child {
    let tools = workspace_root().join(".tools");
    std::process::Command::new(env!("CARGO_BIN_EXE_docflow-ocr-embeddings"))
        .args(stack.stage_flags(OCR_EMBEDDINGS))
        .arg("--pdfium-lib")
        .arg(pdfium_library())
        .arg("--ocr-models")
        .arg(tools.join("models/ppocr"))
        .arg("--onnxruntime-lib")
        .arg(tools.join("lib/libonnxruntime.so"))
        .arg("--embed-model-dir")
        .arg(tools.join("models/minilm"))
        .args(["--workers", "2", "--session-timeout", "6s"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// `kill -9` of the stage process (the real binary, its page-reading workers with it) in the
/// middle of a stream of scans, then a restart: every document ends with one done run, its
/// pages and chunks stored once, and an acknowledged `doc.processed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_leaves_one_result_per_document() {
    use docflow_store::{ResultStore, StageStatus};
    let stack = docflow_stack::Stack::builder()
        .partitions(2)
        .token(ALICE, "alice")
        .ingest_with(|c| c.stages = vec![OCR_EMBEDDINGS.to_owned()])
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    const DOCS: usize = 12;
    let mut ids = Vec::new();
    for i in 0..DOCS {
        // Scans (OCR: a few hundred ms each) so the kill lands mid-stream.
        let lines = [
            format!("Document number {i} of the stream."),
            CONTRACT[1].to_owned(),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let bytes = png(&scan(&lines, 150.0));
        ids.push(document_id(&bytes));
        let r = http
            .post(format!("{}/v1/documents", stack.ingest_url()))
            .bearer_auth(ALICE)
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    let pool = docflow_store::open(&stack.database_url, 2).await.unwrap();
    let store = ResultStore::new(pool.clone());
    let done = || async {
        let mut n = 0;
        for id in &ids {
            if let Some(run) = store.get("alice", id, OCR_EMBEDDINGS, 1).await.unwrap()
                && run.status == StageStatus::Done
            {
                n += 1;
            }
        }
        n
    };
    let spawn = || stage_process(&stack, &[]);
    let mut child = spawn();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let n = done().await;
        if n >= 2 {
            assert!(
                n < DOCS,
                "the stream finished before the kill; make it longer"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap(); // SIGKILL; its workers see their pipe close and exit
    child.wait().unwrap();

    let mut child = spawn();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    while done().await < DOCS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every document done"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = docflow_store::TextStore::new(pool.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for id in &ids {
        let pages = text.pages("alice", id, OCR_EMBEDDINGS).await.unwrap();
        assert_eq!(pages.len(), 1, "{id}");
        assert!(
            pages[0].text.contains("renews automatically"),
            "{:?}",
            pages[0].text
        );
        loop {
            let run = store
                .get("alice", id, OCR_EMBEDDINGS, 1)
                .await
                .unwrap()
                .unwrap();
            if run.event_sent_at_ms.is_some() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "event of {id} unsent"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    stack.stop().await.unwrap();
}

/// SIGTERM in the middle of a long scan (a rolling deploy, a KEDA scale-in) is not a crash,
/// and does not throw away the pages read: each OCR page is kept as it is read, the stage
/// exits 0 once its grace period is over, and the next life reads only the pages not yet
/// kept. Three SIGTERMs with `--max-crash-deliveries 1` (one counted death would
/// dead-letter the document on its next delivery): the document finishes once, every page
/// read, the pages kept before taken as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_scan_keeps_the_pages_read_and_the_document_finishes_once() {
    use docflow_store::{ResultStore, StageStatus, TextKey, TextStore};
    const PAGES: usize = 12;
    let stack = docflow_stack::Stack::builder()
        .partitions(1)
        .token(ALICE, "alice")
        .ingest_with(|c| c.stages = vec![OCR_EMBEDDINGS.to_owned()])
        .start()
        .await
        .unwrap();
    let letters: Vec<&[&str]> = (0..PAGES)
        .map(|i| if i % 2 == 0 { INVOICE } else { CONTRACT })
        .collect();
    let scans: Vec<GrayImage> = letters.iter().map(|l| scan(l, 200.0)).collect();
    let pdf = image_pdf(&scans.iter().collect::<Vec<_>>());
    let id = document_id(&pdf);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/documents", stack.ingest_url()))
        .bearer_auth(ALICE)
        .body(pdf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let pool = docflow_store::open(&stack.database_url, 2).await.unwrap();
    let text = TextStore::new(pool.clone());
    let store = ResultStore::new(pool.clone());
    let key = TextKey {
        tenant_id: "alice",
        document_id: &id,
        stage: OCR_EMBEDDINGS,
        stage_version: 1,
    };
    let spawn = || {
        stage_process(
            &stack,
            &["--shutdown-grace", "1s", "--max-crash-deliveries", "1"],
        )
    };
    let mut kept = 0;
    for life in 0..3 {
        let mut child = spawn();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        while text.pages_of(key).await.unwrap().len() <= kept {
            assert!(
                tokio::time::Instant::now() < deadline,
                "life {life}: no page kept beyond {kept}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let term = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(term.success());
        let status = child.wait().unwrap();
        assert!(status.success(), "life {life}: exit {status} after SIGTERM");
        let now = text.pages_of(key).await.unwrap().len();
        assert!(
            now < PAGES,
            "life {life}: the document was read before the SIGTERM; make it longer"
        );
        assert!(now > kept);
        kept = now;
    }
    let mut child = spawn();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let run = loop {
        if let Some(run) = store.get("alice", &id, OCR_EMBEDDINGS, 1).await.unwrap() {
            break run;
        }
        assert!(tokio::time::Instant::now() < deadline, "never finished");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(run.status, StageStatus::Done, "{:?}", run.error);
    let output: Value = serde_json::from_str(run.output.as_deref().unwrap()).unwrap();
    assert_eq!(output["pages"], PAGES, "{output}");
    assert_eq!(output["resumed_pages"], kept, "{output}");
    let pages = text.pages("alice", &id, OCR_EMBEDDINGS).await.unwrap();
    assert_eq!(pages.len(), PAGES);
    for (page, letter) in pages.iter().zip(&letters) {
        assert!(
            cer(&page.text, &letter.join("\n")) < 0.05,
            "page {}: {:?}",
            page.page,
            page.text
        );
    }
    let dlq = topics::dead_letter(&stack.topics.uploaded, &stack.group(OCR_EMBEDDINGS));
    let dead = stack
        .records_with_header(&dlq, "docflow.dlq.error.class")
        .await
        .unwrap();
    assert!(dead.is_empty(), "{dead:?}");
    stack.stop().await.unwrap();
}

/// One A4 page whose text layer holds `chars` characters, all on the page (0.1 pt type,
/// 1,000 lines).
fn dense_text_page(chars: usize) -> Vec<u8> {
    let per_line = chars / 1000;
    let line: String = "The quick brown fox jumps over the lazy dog. "
        .chars()
        .cycle()
        .take(per_line)
        .collect();
    let mut content = String::from("BT /F1 0.1 Tf 0.8 TL 10 830 Td\n");
    for _ in 0..1000 {
        content.push_str(&format!("({line}) Tj T*\n"));
    }
    content.push_str("ET\n");
    let mut stream = format!("<< /Length {} >>\nstream\n", content.len()).into_bytes();
    stream.extend_from_slice(content.as_bytes());
    stream.extend_from_slice(b"\nendstream");
    docflow_stack::pdf::assemble(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Count 1 /Kids [4 0 R] >>".to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>".to_vec(),
        stream,
    ])
}

/// The stage's page-reading workers as the stage starts them (this package's binary in
/// worker mode, the stage's default limits).
fn worker_pool() -> docflow_stage::isolate::Workers<docflow_ocr_embeddings::ReadWorker> {
    let tools = workspace_root().join(".tools");
    let config = docflow_ocr_embeddings::Config::with_tools(&tools).unwrap();
    let isolation = docflow_stage::isolate::IsolationArgs {
        worker_exe: Some(env!("CARGO_BIN_EXE_docflow-ocr-embeddings").into()),
        ..config.isolation.clone()
    }
    .for_workers(config.stage.consumer.workers);
    docflow_stage::isolate::Workers::new(isolation, &config.read_settings()).unwrap()
}

/// The pages a worker's answer holds.
fn pages_of(reply: docflow_stage::isolate::Reply<docflow_ocr_embeddings::ReadAnswer>) -> Extracted {
    match reply.value {
        docflow_ocr_embeddings::ReadAnswer::Pages(x) => x,
        other => panic!("{other:?}"),
    }
}

/// Scanners deliver pages on their side or upside down: each turn is found, undone, and
/// the page read as well as upright; the lines' boxes stay in the delivered image's pixels.
#[test]
fn pages_turned_a_quarter_a_half_and_three_quarters_are_read_upright() {
    let mut x = extractor(limits());
    let lines: Vec<&str> = INVOICE.iter().chain(CONTRACT).copied().collect();
    let want = lines.join("\n");
    let upright = docflow_stack::pdf::noisy_rotated(&scan(&lines, 200.0), 0.5);
    for degrees in [0u16, 90, 180, 270] {
        let delivered = match degrees {
            90 => image::imageops::rotate90(&upright),
            180 => image::imageops::rotate180(&upright),
            270 => image::imageops::rotate270(&upright),
            _ => upright.clone(),
        };
        let page = x.extract(&png(&delivered)).unwrap().pages.remove(0);
        let layout = page.layout.as_ref().unwrap();
        let rate = cer(&page.text, &want);
        eprintln!(
            "turned {degrees}: read turned back {}, CER {rate:.4}",
            layout.rotation
        );
        // The page was turned `degrees` clockwise: it is read after turning it back.
        assert_eq!(layout.rotation, (360 - degrees) % 360, "turned {degrees}");
        assert!(rate < 0.03, "turned {degrees}: CER {rate}: {:?}", page.text);
        // Rows are found on the upright page: one line of text per line, whatever the turn.
        assert_eq!(
            page.text.lines().count(),
            lines.len(),
            "turned {degrees}: {:?}",
            page.text
        );
        assert_eq!((layout.width, layout.height), delivered.dimensions());
        let (w, h) = delivered.dimensions();
        for line in &layout.lines {
            for &[px, py] in &line.quad {
                assert!(
                    (0.0..=w as f32).contains(&px) && (0.0..=h as f32).contains(&py),
                    "{line:?} outside {w} x {h}"
                );
            }
        }
        // The first line's box is where the first line is on the delivered image: at the
        // top for 0, at the right for 90, at the bottom for 180, at the left for 270.
        let first = &layout.lines[0];
        let cx = first.quad.iter().map(|p| p[0]).sum::<f32>() / 4.0 / w as f32;
        let cy = first.quad.iter().map(|p| p[1]).sum::<f32>() / 4.0 / h as f32;
        let at = match degrees {
            0 => cy < 0.25,
            90 => cx > 0.75,
            180 => cy > 0.75,
            _ => cx < 0.25,
        };
        assert!(
            at,
            "turned {degrees}: first line at ({cx:.2}, {cy:.2}): {first:?}"
        );
    }
}

/// Degenerate but legitimate shapes are read (or found empty) in one pass of bounded size:
/// never a detector input of 92,000 x 736 (a 2000 x 16 strip scaled up to the detector's
/// 736-pixel short side), an onnxruntime error or a worker out of memory.
#[test]
fn thin_long_and_tiny_images_are_read() {
    let mut x = extractor(limits());
    let stripes = |w: u32, h: u32| {
        GrayImage::from_fn(w, h, |x, y| {
            image::Luma([if (x / 7 + y / 5) % 3 == 0 { 30 } else { 240 }])
        })
    };
    for (w, h) in [
        (2000, 1),
        (2000, 16),
        (2000, 64),
        (1, 2000),
        (16, 2000),
        (3, 3),
        (1, 1),
    ] {
        let page = x.extract(&png(&stripes(w, h))).unwrap().pages.remove(0);
        let layout = page.layout.unwrap();
        assert_eq!((layout.width, layout.height), (w, h), "{w} x {h}");
    }
    // A line of text cut out of a scan as a thin strip (2000 x 40 at 200 dpi) reads.
    let line = scan(&["Invoice 2024-0042 from ACME Supplies Ltd."], 200.0);
    // The baseline is 770 pt up an 842 pt page: 200 px down at 200 dpi; the type 12 pt.
    let strip = image::imageops::crop_imm(&line, 0, 165, line.width(), 50).to_image();
    let page = x.extract(&png(&strip)).unwrap().pages.remove(0);
    assert!(
        cer(&page.text, "Invoice 2024-0042 from ACME Supplies Ltd.") < 0.05,
        "{:?}",
        page.text
    );
}

/// 250 blank pages (a 30 KB PDF) cost no OCR: pages that draw nothing are not even
/// rendered (nor counted against the pixel budget), and a scan of a blank sheet, noise and
/// all, is found blank before detection runs.
#[test]
fn blank_pages_cost_no_ocr() {
    let mut x = extractor(Limits {
        max_pages: 500,
        ..limits()
    });
    let nothing: &[&str] = &[];
    let pdf = text_pdf(&vec![nothing; 250]);
    let read = x.extract(&pdf).unwrap();
    assert_eq!(read.pages.len(), 250);
    assert!(
        read.pages
            .iter()
            .all(|p| p.text.is_empty() && p.layout.as_ref().is_none_or(|l| l.lines.is_empty()))
    );
    assert_eq!(read.ocr_pixels, 0);
    let sheet = docflow_stack::pdf::noisy_rotated(
        &GrayImage::from_pixel(1700, 2200, image::Luma([250])),
        0.0,
    );
    let page = x.extract(&png(&sheet)).unwrap().pages.remove(0);
    assert!(page.text.is_empty(), "{:?}", page.text);
    assert_eq!(page.timings.unwrap().detect_ms, 0.0, "detection ran");
    // One short line on the same sheet is read.
    let mut line = sheet.clone();
    let words = scan(&["Page 2 of 2"], 200.0);
    image::imageops::overlay(
        &mut line,
        &image::imageops::crop_imm(&words, 0, 150, 800, 80).to_image(),
        100,
        1000,
    );
    let page = x.extract(&png(&line)).unwrap().pages.remove(0);
    assert!(page.text.contains("Page 2 of 2"), "{:?}", page.text);
}

/// A page whose text layer holds 5 million characters (0.1 pt type) is read whole by a
/// worker at the stage's default limits; reading a text layer costs pdfium ~190 bytes a
/// character at its peak (bench/results/ocr-pages.md), so one of 10 million dies at the
/// 2 GiB limit: dead-lettered `memory_limit` in seconds, the next document read by a fresh
/// worker.
#[tokio::test]
async fn a_text_layer_of_millions_of_characters_is_read_within_the_worker_limits() {
    let pool = worker_pool();
    let answer = pool.run(&dense_text_page(5_000_000)).await.unwrap();
    let x = pages_of(answer);
    assert_eq!(x.pages[0].source, "text_layer");
    assert!(
        x.pages[0].text.len() >= 5_000_000,
        "{}",
        x.pages[0].text.len()
    );
    let memory = x.memory.unwrap();
    assert!(memory.peak_rss_bytes < 1536 << 20, "{memory:?}");
    let e = pool.run(&dense_text_page(10_000_000)).await.unwrap_err();
    assert_eq!(e.class(), "memory_limit", "{e}");
    let answer = pool.run(&text_pdf(&[INVOICE])).await.unwrap();
    let x = pages_of(answer);
    assert!(x.pages[0].text.contains("ACME"));
}

/// A scan is read as the stage reads it: the plan (limits, text layers, blank pages) in
/// one job, then each page to OCR a job of its own across the stage's workers. The pages
/// come back in order, and each page gets the worker's whole CPU budget: a document that
/// needs more CPU in all than one budget (which, read as one job, it dies of) finishes.
#[tokio::test]
async fn a_scan_is_read_page_by_page_across_workers_each_page_on_its_own_budget() {
    let letters = [INVOICE, CONTRACT, INVOICE, CONTRACT, INVOICE, CONTRACT];
    let scans: Vec<GrayImage> = letters.iter().map(|l| scan(l, 200.0)).collect();
    let pdf = image_pdf(&scans.iter().collect::<Vec<_>>());
    let tools = workspace_root().join(".tools");
    let mut config = docflow_ocr_embeddings::Config::with_tools(&tools).unwrap();
    config.read.dpi = 150.0;
    let pool_with = |cpu: Duration| {
        let isolation = docflow_stage::isolate::IsolationArgs {
            worker_exe: Some(env!("CARGO_BIN_EXE_docflow-ocr-embeddings").into()),
            worker_cpu: cpu,
            ..config.isolation.clone()
        }
        .for_workers(2);
        docflow_stage::isolate::Workers::new(isolation, &config.read_settings()).unwrap()
    };
    // What one page costs here, then a budget of three pages: less than the six need
    // together, more than any one of them.
    let page = pool_with(Duration::from_secs(600))
        .run(&docflow_ocr_embeddings::pages::Request::Page(1).encode(&pdf))
        .await
        .unwrap();
    let page = pages_of(page);
    let budget = (3.0 * page.cpu_seconds.unwrap()).ceil().max(1.0);
    let pool = pool_with(Duration::from_secs_f64(budget));
    let read = docflow_ocr_embeddings::read_document(&pool, &pdf, 2)
        .await
        .unwrap();
    assert_eq!(
        read.pages.iter().map(|p| p.page).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    for (page, letter) in read.pages.iter().zip(letters) {
        assert_eq!(page.source, "ocr");
        let want = letter.join("\n");
        assert!(cer(&page.text, &want) < 0.05, "{:?}", page.text);
    }
    let cpu = read.cpu_seconds.unwrap();
    assert!(
        cpu > budget,
        "the pages took {cpu} CPU-s in all, the budget of a page is {budget}"
    );
    // The same document as one job runs out of its budget.
    let whole = pool
        .run(&docflow_ocr_embeddings::pages::Request::Document.encode(&pdf))
        .await
        .unwrap_err();
    assert_eq!(whole.class(), "timeout", "{whole}");
    // A text layer needs no page job; a page the document does not have is a request the
    // worker refuses as the stage's mistake (`setup`), not the document's.
    let text = docflow_ocr_embeddings::read_document(&pool, &text_pdf(&[INVOICE]), 2)
        .await
        .unwrap();
    assert_eq!(text.pages[0].source, "text_layer");
    let e = pool
        .run(&docflow_ocr_embeddings::pages::Request::Page(7).encode(&pdf))
        .await
        .unwrap_err();
    match e {
        docflow_stage::isolate::IsolationError::Refused(r) => {
            assert_eq!(r.class, "setup", "{r:?}");
            assert!(r.transient, "{r:?}");
            assert_eq!(r.message, "bad request: no page 7");
        }
        other => panic!("{other:?}"),
    }
}

/// The onnxruntime here is the CPU build: `--ocr-device auto` reads on the CPU and says why
/// not on a GPU; `cuda` refuses to start, with the same reason.
#[test]
fn the_ocr_device_falls_back_to_the_cpu_saying_why_or_refuses() {
    use docflow_ocr_embeddings::ocr::OcrDevice;
    let tools = workspace_root().join(".tools");
    let config = |device| OcrConfig {
        models: tools.join("models/ppocr"),
        runtime: tools.join("lib/libonnxruntime.so"),
        threads: 1,
        max_side: 2000,
        det_strip_pixels: docflow_ocr_embeddings::ocr::DET_STRIP_PIXELS,
        min_confidence: 0.5,
        orientation: true,
        device,
    };
    let auto = Ocr::load(config(OcrDevice::Auto)).unwrap();
    assert_eq!(auto.device(), "cpu");
    assert!(
        auto.device_reason().starts_with("--ocr-device auto: ")
            && auto.device_reason().contains("no CUDA execution provider"),
        "{}",
        auto.device_reason()
    );
    let e = Ocr::load(config(OcrDevice::Cuda)).unwrap_err().to_string();
    assert!(
        e.starts_with("--ocr-device cuda: ") && e.contains("no CUDA execution provider"),
        "{e}"
    );
    assert_eq!(Ocr::load(config(OcrDevice::Cpu)).unwrap().device(), "cpu");
}
