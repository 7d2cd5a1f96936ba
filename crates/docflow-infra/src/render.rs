//! Rendering a kustomization the way `kustomize build` does, for the part of kustomize that
//! `infra/` uses: `resources` (files and folders with their own kustomization), `namespace`,
//! `images` and strategic-merge `patches` by path. Anything else in a kustomization is an
//! error rather than silently ignored. The merge follows Kubernetes' strategic merge patch
//! for built-in kinds (lists of containers, env, volumes merged by `name`, volume mounts by
//! `mountPath`; other lists replaced; `null` deletes) and JSON merge patch for custom
//! resources (KEDA, Prometheus Operator): lists replaced.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::InfraError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Kustomization {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<String>,
    namespace: Option<String>,
    #[serde(default)]
    images: Vec<Image>,
    #[serde(default)]
    patches: Vec<PatchRef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Image {
    name: String,
    new_name: Option<String>,
    new_tag: Option<String>,
    /// kustomize: a digest follows the tag (`name:tag@sha256:…`).
    #[serde(default)]
    digest: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchRef {
    path: String,
}

/// Kinds without a namespace (the namespace transformer leaves them alone).
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ClusterTriggerAuthentication",
];

fn err(path: &Path, msg: impl std::fmt::Display) -> InfraError {
    InfraError::Render(format!("{}: {msg}", path.display()))
}

/// Every YAML document of `path`, as JSON values (empty documents skipped).
pub fn read_documents(path: &Path) -> Result<Vec<Value>, InfraError> {
    let text = std::fs::read_to_string(path).map_err(|e| err(path, e))?;
    parse_documents(&text).map_err(|e| err(path, e))
}

/// Every YAML document of `text`.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, InfraError> {
    let mut docs = Vec::new();
    for de in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(de).map_err(|e| InfraError::Render(e.to_string()))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// `(kind, name)` of a manifest.
pub fn id(doc: &Value) -> (String, String) {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    (
        s(doc.get("kind")),
        s(doc.get("metadata").and_then(|m| m.get("name"))),
    )
}

/// The manifests `dir`'s kustomization builds, in order.
pub fn render(dir: &Path) -> Result<Vec<Value>, InfraError> {
    let kfile = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&kfile).map_err(|e| err(&kfile, e))?;
    let k: Kustomization = serde_yaml::from_str(&text).map_err(|e| err(&kfile, e))?;
    if k.kind != "Kustomization" || !k.api_version.starts_with("kustomize.config.k8s.io/") {
        return Err(err(&kfile, "not a Kustomization"));
    }
    let mut docs: Vec<Value> = Vec::new();
    for r in &k.resources {
        let p: PathBuf = dir.join(r);
        let more = if p.is_dir() {
            render(&p)?
        } else {
            read_documents(&p)?
        };
        for d in more {
            if docs.iter().any(|x| id(x) == id(&d)) {
                let (kind, name) = id(&d);
                return Err(err(&p, format!("{kind} {name} is defined twice")));
            }
            docs.push(d);
        }
    }
    for pr in &k.patches {
        let p = dir.join(&pr.path);
        for patch in read_documents(&p)? {
            let target = id(&patch);
            let found: Vec<usize> = (0..docs.len())
                .filter(|i| id(&docs[*i]) == target)
                .collect();
            let [i] = found[..] else {
                return Err(err(
                    &p,
                    format!(
                        "the patch of {} {} matches {} resources",
                        target.0,
                        target.1,
                        found.len()
                    ),
                ));
            };
            let builtin = is_builtin(&docs[i]);
            merge(&mut docs[i], &patch, builtin, "");
        }
    }
    for img in &k.images {
        for d in &mut docs {
            set_images(d, img);
        }
    }
    if let Some(ns) = &k.namespace {
        for d in &mut docs {
            let (kind, _) = id(d);
            if CLUSTER_SCOPED.contains(&kind.as_str()) {
                continue;
            }
            if let Some(m) = d.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("namespace".into(), Value::String(ns.clone()));
            }
        }
    }
    Ok(docs)
}

/// Kubernetes' own API groups (strategic merge applies); custom resources get JSON merge.
fn is_builtin(doc: &Value) -> bool {
    let api = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match api.split_once('/') {
        None => true,
        Some((group, _)) => !group.contains('.') || group.ends_with(".k8s.io"),
    }
}

fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers" | "initContainers" | "env" | "volumes" | "imagePullSecrets" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        _ => None,
    }
}

fn merge(target: &mut Value, patch: &Value, builtin: bool, field: &str) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, pv) in p {
                if pv.is_null() {
                    t.remove(k);
                    continue;
                }
                match t.get_mut(k) {
                    Some(tv) => merge(tv, pv, builtin, k),
                    None => {
                        t.insert(k.clone(), pv.clone());
                    }
                }
            }
        }
        (Value::Array(t), Value::Array(p)) if builtin && merge_key(field).is_some() => {
            // As kustomize orders it: the patch's items first (merged into the originals they
            // name), then the originals it does not name, in their order.
            let key = merge_key(field).unwrap_or("name");
            let mut rest = std::mem::take(t);
            for pv in p {
                let kv = pv.get(key);
                match rest.iter().position(|tv| kv.is_some() && tv.get(key) == kv) {
                    Some(i) => {
                        let mut tv = rest.remove(i);
                        merge(&mut tv, pv, builtin, "");
                        t.push(tv);
                    }
                    None => t.push(pv.clone()),
                }
            }
            t.extend(rest);
        }
        (t, p) => *t = p.clone(),
    }
}

fn set_images(doc: &mut Value, img: &Image) {
    let Some(spec) = doc
        .pointer_mut("/spec/template/spec")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for list in ["containers", "initContainers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs {
            let Some(image) = c.get("image").and_then(Value::as_str) else {
                continue;
            };
            let (name, tag) = match image.rsplit_once(':') {
                Some((n, t)) if !t.contains('/') => (n, Some(t)),
                _ => (image, None),
            };
            if name != img.name {
                continue;
            }
            let new_name = img.new_name.as_deref().unwrap_or(name);
            let tagged = match (img.new_tag.as_deref(), tag) {
                (Some(t), _) | (None, Some(t)) => format!("{new_name}:{t}"),
                (None, None) => new_name.to_owned(),
            };
            // As kustomize writes it: the tag kept for people, the digest for the runtime.
            let new = match img.digest.as_deref() {
                Some(d) => format!("{tagged}@{d}"),
                None => tagged,
            };
            if let Some(o) = c.as_object_mut() {
                o.insert("image".into(), Value::String(new));
            }
        }
    }
}

/// Multi-document YAML of `docs`.
pub fn to_yaml(docs: &[Value]) -> Result<String, InfraError> {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(d).map_err(|e| InfraError::Render(e.to_string()))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_by_name_for_builtin_kinds_and_replace_for_custom_ones() {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": "docflow:latest", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}});
        let p = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}}});
        merge(&mut d, &p, true, "");
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/env").unwrap(),
            &json!([{"name": "B", "value": "3"}, {"name": "C", "value": "4"}, {"name": "A", "value": "1"}])
        );
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/image").unwrap(),
            "docflow:latest"
        );
        set_images(
            &mut d,
            &Image {
                name: "docflow".into(),
                new_name: Some("reg/docflow".into()),
                new_tag: Some("1.2".into()),
                digest: None,
            },
        );
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/image").unwrap(),
            "reg/docflow:1.2"
        );
        let digest = format!("sha256:{}", "ab".repeat(32));
        set_images(
            &mut d,
            &Image {
                name: "reg/docflow".into(),
                new_name: None,
                new_tag: Some("1.3".into()),
                digest: Some(digest.clone()),
            },
        );
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/image").unwrap(),
            &format!("reg/docflow:1.3@{digest}")
        );

        let mut so = json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "spec": {"minReplicaCount": 1, "triggers": [{"name": "a"}, {"name": "b"}], "x": 1}});
        assert!(!is_builtin(&so));
        merge(
            &mut so,
            &json!({"spec": {"triggers": [{"name": "b", "k": 1}], "x": null}}),
            false,
            "",
        );
        assert_eq!(
            so,
            json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "spec": {"minReplicaCount": 1, "triggers": [{"name": "b", "k": 1}]}})
        );
        assert!(is_builtin(&json!({"apiVersion": "networking.k8s.io/v1"})));
        assert!(is_builtin(&json!({"apiVersion": "v1"})));
        assert!(!is_builtin(
            &json!({"apiVersion": "monitoring.coreos.com/v1"})
        ));
    }

    #[test]
    fn unknown_kustomization_fields_and_ambiguous_patches_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kustomization.yaml"),
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncommonLabels: {a: b}\n",
        )
        .unwrap();
        let e = render(dir.path()).unwrap_err().to_string();
        assert!(e.contains("commonLabels"), "{e}");
        std::fs::write(
            dir.path().join("kustomization.yaml"),
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [a.yaml]\npatches: [{path: p.yaml}]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("p.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y}\n",
        )
        .unwrap();
        let e = render(dir.path()).unwrap_err().to_string();
        assert!(e.contains("matches 0 resources"), "{e}");
    }
}
