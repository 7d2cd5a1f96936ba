//! Helpers the generators share: YAML quoting, labels, kustomizations, the pieces of a
//! Deployment (head, container, env, resources, volumes), Service, PodDisruptionBudget and
//! the autoscalers' `behavior`.

use std::fmt::Write as _;

use super::HEADER;
use crate::plan_file::Sizing;

/// A YAML double-quoted scalar.
pub(super) fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

pub(super) fn labels(out: &mut String, indent: usize, name: &str, component: &str) {
    let pad = " ".repeat(indent);
    let _ = writeln!(out, "{pad}app.kubernetes.io/name: {name}");
    let _ = writeln!(out, "{pad}app.kubernetes.io/component: {component}");
    let _ = writeln!(out, "{pad}app.kubernetes.io/part-of: docflow");
}

pub(super) fn kustomization(resources: &[&str]) -> String {
    let mut s = format!(
        "{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
    );
    for r in resources {
        let _ = writeln!(s, "  - {r}");
    }
    s
}

/// Container env shared by the services: Kafka credentials and the database.
pub(super) fn secret_env(out: &mut String, pad: &str, database: bool) {
    for (name, secret, key) in [
        ("KAFKA_SASL_USERNAME", "docflow-kafka", "username"),
        ("KAFKA_SASL_PASSWORD", "docflow-kafka", "password"),
    ] {
        let _ = write!(
            out,
            "{pad}- name: {name}\n{pad}  valueFrom:\n{pad}    secretKeyRef:\n{pad}      name: {secret}\n{pad}      key: {key}\n"
        );
    }
    if database {
        let _ = write!(
            out,
            "{pad}- name: DATABASE_URL\n{pad}  valueFrom:\n{pad}    secretKeyRef:\n{pad}      name: docflow-database\n{pad}      key: url\n"
        );
    }
}

/// Requests, and memory (and the GPU) as limits: CPU is not limited, so a replica may burst.
pub(super) fn resources(out: &mut String, sizing: &Sizing, gpu: bool) {
    let _ = write!(
        out,
        "          resources:\n            requests:\n              cpu: {cpu}\n              memory: {mem}\n            limits:\n              memory: {mem}\n",
        cpu = q(&sizing.cpu),
        mem = q(&sizing.memory),
    );
    if gpu {
        out.push_str("              nvidia.com/gpu: 1\n");
    }
}

pub(super) fn pdb(name: &str, component: &str) -> String {
    let mut s = format!(
        "{HEADER}# Voluntary disruptions (node drains, upgrades) take one replica at a time.
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {name}
  labels:
"
    );
    labels(&mut s, 4, name, component);
    let _ = write!(
        s,
        "spec:\n  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: {name}\n"
    );
    s
}

pub(super) fn service(name: &str, component: &str, port_name: &str, port: u16) -> String {
    let mut s =
        format!("{HEADER}apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  labels:\n");
    labels(&mut s, 4, name, component);
    let _ = write!(
        s,
        "spec:\n  selector:\n    app.kubernetes.io/name: {name}\n  ports:\n    - name: {port_name}\n      port: {port}\n      targetPort: {port_name}\n"
    );
    s
}

/// The Deployment head up to the container list.
pub(super) fn deployment_head(
    out: &mut String,
    name: &str,
    component: &str,
    replicas: Option<u32>,
    grace_s: u64,
    comment: &str,
    pod_extra: &str,
) {
    let _ = write!(
        out,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  labels:\n"
    );
    labels(out, 4, name, component);
    out.push_str("spec:\n");
    match replicas {
        Some(n) => {
            let _ = writeln!(out, "  replicas: {n}");
        }
        None => out.push_str(
            "  # No `replicas`: the autoscaler owns the count, and applying these manifests again\n  # does not reset it.\n",
        ),
    }
    let _ = write!(
        out,
        "  revisionHistoryLimit: 5
  selector:
    matchLabels:
      app.kubernetes.io/name: {name}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
"
    );
    labels(out, 8, name, component);
    let _ = write!(
        out,
        "    spec:
      serviceAccountName: docflow
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        fsGroup: 10001
{comment}      terminationGracePeriodSeconds: {grace_s}
{pod_extra}      containers:
"
    );
}

/// A container's start: name, the image, its binary, its port, the shared ConfigMap, and
/// the `env:` list the caller fills.
pub(super) fn container_head(
    out: &mut String,
    name: &str,
    binary: &str,
    port_name: &str,
    port: u16,
) {
    let _ = write!(
        out,
        "        - name: {name}
          image: docflow:latest
          command: [{bin}]
          ports:
            - name: {port_name}
              containerPort: {port}
          envFrom:
            - configMapRef:
                name: docflow-config
          env:
",
        bin = q(binary),
    );
}

pub(super) fn volumes(out: &mut String, kafka: bool, tokens: bool) {
    out.push_str("      volumes:\n");
    if kafka {
        out.push_str(
            "        - name: kafka-ca\n          secret:\n            secretName: docflow-kafka\n            items:\n              - key: ca.crt\n                path: ca.crt\n",
        );
    }
    if tokens {
        out.push_str(
            "        - name: tokens\n          secret:\n            secretName: docflow-ingest\n            items:\n              - key: tokens\n                path: tokens\n",
        );
    }
    out.push_str(
        "        - name: objects\n          persistentVolumeClaim:\n            claimName: docflow-objects\n",
    );
}

pub(super) fn behavior(out: &mut String, pad: &str) {
    let _ = write!(
        out,
        "{pad}# The seed's asymmetry: up fast (30 s window, at most doubling per minute), down
{pad}# slowly (10 minutes of lower recommendations, then 2 pods per 2 minutes): a
{pad}# replica that leaves too early costs a cold start when the load returns.
{pad}scaleUp:
{pad}  stabilizationWindowSeconds: 30
{pad}  selectPolicy: Max
{pad}  policies:
{pad}    - type: Percent
{pad}      value: 100
{pad}      periodSeconds: 60
{pad}scaleDown:
{pad}  stabilizationWindowSeconds: 600
{pad}  selectPolicy: Max
{pad}  policies:
{pad}    - type: Pods
{pad}      value: 2
{pad}      periodSeconds: 120
"
    );
}
