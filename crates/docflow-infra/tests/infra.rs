//! infra/: the checked-in manifests are what the plan generates, every overlay renders, and
//! every rendered manifest is valid against the committed Kubernetes, KEDA and Prometheus
//! Operator schemas.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use docflow_infra::generate::generate;
use docflow_infra::plan_file::PlanFile;
use docflow_infra::render::{id, render};

fn infra() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra")
}

fn plan() -> PlanFile {
    PlanFile::parse(&std::fs::read_to_string(infra().join("plan.yaml")).unwrap()).unwrap()
}

/// `DOCFLOW_INFRA_BLESS=1` rewrites infra/ from the plan instead of failing (what
/// `docflow infra generate` does).
#[test]
fn checked_in_manifests_match_the_plan() {
    let files = generate(&plan()).unwrap();
    if std::env::var_os("DOCFLOW_INFRA_BLESS").is_some() {
        docflow_infra::write(&files, &infra()).unwrap();
    }
    let drift = docflow_infra::check(&files, &infra()).unwrap();
    assert!(
        drift.is_empty(),
        "infra/ drifted from infra/plan.yaml (run `docflow infra generate`):\n{}",
        drift.join("\n")
    );
}

fn schemas() -> docflow_infra::validate::Schemas {
    docflow_infra::validate::Schemas::load(&infra().join("schemas")).unwrap()
}

#[test]
fn every_overlay_renders_and_every_manifest_is_valid() {
    let schemas = schemas();
    let overlays = docflow_infra::overlays(&infra()).unwrap();
    assert_eq!(overlays.len(), plan().environments.len());
    for overlay in overlays {
        let docs = render(&overlay).unwrap();
        let env = overlay.file_name().unwrap().to_string_lossy().into_owned();
        let kinds: Vec<(String, String)> = docs.iter().map(id).collect();
        for stage in &plan().stages {
            let name = format!("docflow-{}", stage.name);
            for kind in [
                "Deployment",
                "Service",
                "PodDisruptionBudget",
                "ScaledObject",
            ] {
                assert!(
                    kinds.contains(&(kind.to_owned(), name.clone())),
                    "{env}: no {kind} {name}"
                );
            }
        }
        for d in &docs {
            let problems = schemas.validate(d);
            assert!(problems.is_empty(), "{env}: {problems:#?}");
            assert!(
                d.pointer("/metadata/namespace").is_some() || id(d).0 == "Namespace",
                "{env}: {:?} has no namespace",
                id(d)
            );
        }
    }
}

/// The validation is real: typical mistakes in a rendered manifest are reported.
#[test]
fn the_schemas_reject_what_a_cluster_would() {
    let schemas = schemas();
    let docs = render(&infra().join("overlays/prod")).unwrap();
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| id(d) == (kind.to_owned(), name.to_owned()))
            .unwrap()
            .clone()
    };
    let mut so = find("ScaledObject", "docflow-ocr-embeddings");
    so["spec"]["minReplicaCounts"] = 3.into();
    assert!(
        !schemas.validate(&so).is_empty(),
        "a misspelt ScaledObject field"
    );
    let mut so = find("ScaledObject", "docflow-ocr-embeddings");
    so["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 5.into();
    assert!(
        !schemas.validate(&so).is_empty(),
        "trigger metadata must be strings"
    );
    let mut d = find("Deployment", "docflow-thumbnails");
    d["spec"]["template"]["spec"]["containers"][0]["resource"] = serde_json::json!({});
    assert!(
        !schemas.validate(&d).is_empty(),
        "a misspelt container field"
    );
    let mut d = find("Deployment", "docflow-thumbnails");
    d["spec"]["replicas"] = "two".into();
    assert!(!schemas.validate(&d).is_empty());
    let mut pdb = find("PodDisruptionBudget", "docflow-ingest");
    pdb["apiVersion"] = "policy/v1beta1".into();
    assert!(!schemas.validate(&pdb).is_empty(), "a removed API version");
    let mut rule = find("PrometheusRule", "docflow");
    rule["spec"]["groups"][0]["rules"][0]["expresion"] = "up".into();
    assert!(!schemas.validate(&rule).is_empty());
    assert_eq!(schemas.custom_kinds().len(), 4);
}

/// Dev runs ocr-embeddings on CPU nodes: its overlay removes the GPU request, node selector
/// and toleration that prod keeps.
#[test]
fn an_environment_can_run_the_gpu_stage_on_cpu_nodes() {
    let ocr = |env: &str| {
        render(&infra().join("overlays").join(env))
            .unwrap()
            .into_iter()
            .find(|d| id(d) == ("Deployment".to_owned(), "docflow-ocr-embeddings".to_owned()))
            .unwrap()
    };
    let (dev, prod) = (ocr("dev"), ocr("prod"));
    let pod = |d: &serde_json::Value| d["spec"]["template"]["spec"].clone();
    assert!(pod(&dev).get("nodeSelector").is_none() && pod(&dev).get("tolerations").is_none());
    assert!(
        pod(&dev)["containers"][0]["resources"]["limits"]
            .get("nvidia.com/gpu")
            .is_none()
    );
    assert_eq!(
        pod(&dev)["containers"][0]["resources"]["limits"]["memory"],
        "4Gi"
    );
    assert_eq!(pod(&prod)["nodeSelector"]["nvidia.com/gpu.present"], "true");
    assert_eq!(
        pod(&prod)["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        1
    );
}

/// What the plan derives reaches the manifests, and a hand edit is caught as drift.
#[test]
fn the_plan_drives_the_manifests() {
    let mut p = plan();
    let prod = p
        .environments
        .iter()
        .position(|e| e.name == "prod")
        .unwrap();
    let ocr = p.environments[prod]
        .stages
        .iter()
        .position(|s| s.name == "ocr-embeddings")
        .unwrap();
    // Twice the SLA wait and a lazier commit: lagThreshold = μ × (SLA + commit interval)
    // (25/s × (0.4 + 0.2) s = 15).
    p.environments[prod].stages[ocr].sla_wait = "400ms".into();
    p.commit_interval = "200ms".into();
    // A digest pins the image every container runs.
    let digest = format!("sha256:{}", "0f".repeat(32));
    p.environments[prod].image_digest = Some(digest.clone());
    let dir = tempfile::tempdir().unwrap();
    docflow_infra::write(&generate(&p).unwrap(), dir.path()).unwrap();
    let docs = render(&dir.path().join("overlays/prod")).unwrap();
    let so = docs
        .iter()
        .find(|d| {
            id(d)
                == (
                    "ScaledObject".to_owned(),
                    "docflow-ocr-embeddings".to_owned(),
                )
        })
        .unwrap();
    assert_eq!(so["spec"]["triggers"][0]["metadata"]["lagThreshold"], "15");
    assert_eq!(so["spec"]["maxReplicaCount"], 12, "the partitions cap it");
    assert_eq!(so["spec"]["triggers"][1]["type"], "prometheus");
    let d = docs
        .iter()
        .find(|d| id(d) == ("Deployment".to_owned(), "docflow-ocr-embeddings".to_owned()))
        .unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("ghcr.io/example/docflow:0.1.0@{digest}")
    );
    // The consumers commit at the interval lagThreshold was derived with.
    let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "DOCFLOW_COMMIT_INTERVAL" && e["value"] == "200ms"),
        "{env:?}"
    );
    // Without one, the tag.
    let mut tagged = p.clone();
    tagged.environments[prod].image_digest = None;
    let tagged_dir = tempfile::tempdir().unwrap();
    docflow_infra::write(&generate(&tagged).unwrap(), tagged_dir.path()).unwrap();
    let ingest = render(&tagged_dir.path().join("overlays/prod"))
        .unwrap()
        .into_iter()
        .find(|d| id(d) == ("Deployment".to_owned(), "docflow-ingest".to_owned()))
        .unwrap();
    assert_eq!(
        ingest["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/example/docflow:0.1.0"
    );
    // A digest that is not one is refused with the plan.
    let text: String = std::fs::read_to_string(infra().join("plan.yaml"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with("image_digest:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let bad = text.replacen(
        "    image_tag: \"0.1.0\"\n",
        "    image_tag: \"0.1.0\"\n    image_digest: sha256:0123\n",
        1,
    );
    assert_ne!(bad, text);
    let err = PlanFile::parse(&bad).unwrap_err().to_string();
    assert!(err.contains("image_digest \"sha256:0123\""), "{err}");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        1
    );
    // The overlay's max.poll.interval replaced the base's value in place.
    let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let mpi: Vec<_> = env
        .iter()
        .filter(|e| e["name"] == "KAFKA_MAX_POLL_INTERVAL")
        .collect();
    assert_eq!(mpi.len(), 1);
    assert_eq!(mpi[0]["value"], "300000ms");
    // A hand edit is drift; so is a file the plan does not make.
    let f = dir
        .path()
        .join("overlays/prod/patches/ocr-embeddings-scaledobject.yaml");
    let text = std::fs::read_to_string(&f)
        .unwrap()
        .replace("minReplicaCount: 9", "minReplicaCount: 2");
    std::fs::write(&f, text).unwrap();
    std::fs::write(dir.path().join("base/extra.yaml"), "a: 1\n").unwrap();
    let drift = docflow_infra::check(&generate(&p).unwrap(), dir.path()).unwrap();
    assert_eq!(
        drift,
        vec![
            "base/extra.yaml: not generated by the plan".to_owned(),
            "overlays/prod/patches/ocr-embeddings-scaledobject.yaml: differs from the plan"
                .to_owned()
        ]
    );
}

/// Where `kubectl` is installed, its kustomize builds the same manifests as ours.
#[test]
fn kubectl_kustomize_agrees_where_installed() {
    let Ok(out) = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
    else {
        eprintln!("kubectl not installed: the comparison with kustomize is skipped");
        return;
    };
    assert!(out.status.success());
    for overlay in docflow_infra::overlays(&infra()).unwrap() {
        let out = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&overlay)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut theirs =
            docflow_infra::render::parse_documents(&String::from_utf8(out.stdout).unwrap())
                .unwrap();
        let mut ours = render(&overlay).unwrap();
        let key = |d: &serde_json::Value| id(d);
        theirs.sort_by_key(key);
        ours.sort_by_key(key);
        assert_eq!(ours.len(), theirs.len());
        for (a, b) in ours.iter().zip(&theirs) {
            assert!(
                a == b,
                "{}: {:?}\nours:   {}\ntheirs: {}",
                overlay.display(),
                id(a),
                serde_json::to_string(a).unwrap(),
                serde_json::to_string(b).unwrap()
            );
        }
    }
}

/// With an `otlp_endpoint`, every service of the environment exports its spans there.
#[test]
fn services_export_spans_where_the_plan_names_a_collector() {
    let docs = render(&infra().join("overlays/prod")).unwrap();
    let cm = docs
        .iter()
        .find(|d| id(d) == ("ConfigMap".to_owned(), "docflow-config".to_owned()))
        .unwrap();
    assert_eq!(
        cm["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"],
        "http://otel-collector.monitoring:4318"
    );
    assert_eq!(
        cm["data"]["OTEL_RESOURCE_ATTRIBUTES"],
        "deployment.environment=prod"
    );
    for d in docs.iter().filter(|d| id(d).0 == "Deployment") {
        let from =
            &d["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"];
        assert_eq!(from, "docflow-config", "{:?}", id(d));
    }
}

/// The Grafana dashboard only plots, and the PrometheusRule only alerts on, series that
/// docflow exports (or kube-state-metrics' HPA series): every `docflow_*` metric in their
/// queries is registered somewhere in the code.
#[test]
fn the_dashboard_plots_metrics_that_exist() {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(infra().join("grafana/docflow.json")).unwrap(),
    )
    .unwrap();
    let root = infra().join("..");
    let mut sources = String::new();
    for dir in ["crates", "services"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("generate.rs") {
                    sources.push_str(&std::fs::read_to_string(&p).unwrap());
                }
            }
        }
    }
    let exported = |what: &str, expr: &str| {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.starts_with("docflow_") {
                continue;
            }
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(word);
            assert!(
                sources.contains(&format!("\"{base}\"")),
                "{what}: {base} is not a metric docflow exports"
            );
        }
    };
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    for panel in panels {
        for t in panel["targets"].as_array().unwrap() {
            exported(&panel["title"].to_string(), t["expr"].as_str().unwrap());
        }
    }
    // The same for the alerts.
    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(infra().join("base/monitoring/prometheusrule.yaml")).unwrap(),
    )
    .unwrap();
    let mut alerts = 0;
    for group in rules["spec"]["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            exported(
                rule["alert"].as_str().unwrap(),
                rule["expr"].as_str().unwrap(),
            );
            alerts += 1;
        }
    }
    assert!(alerts >= 8, "{alerts} alerts");
}
