//! `base/common`: the shared ConfigMap, the ServiceAccount, the objects volume and KEDA's
//! TriggerAuthentication.

use std::fmt::Write as _;

use super::common::{kustomization, labels};
use super::{Files, HEADER};
use crate::plan_file::PlanFile;

pub(super) fn common(plan: &PlanFile, files: &mut Files) {
    files.insert(
        "base/common/kustomization.yaml".into(),
        kustomization(&[
            "configmap.yaml",
            "serviceaccount.yaml",
            "objects.yaml",
            "triggerauthentication.yaml",
        ]),
    );
    let mut cm = format!(
        "{HEADER}# Settings every service reads (each is also a flag; `<binary> --help` lists them).
# Secrets are not generated: create them before applying (README, \"Deploying\"):
#   docflow-kafka     username, password, ca.crt (the brokers' CA), sasl (scram_sha512),
#                     tls (enable) — the last two for KEDA's TriggerAuthentication
#   docflow-database  url (postgres://...)
#   docflow-ingest    tokens (one `token tenant` per line)
apiVersion: v1
kind: ConfigMap
metadata:
  name: docflow-config
  labels:
"
    );
    labels(&mut cm, 4, "docflow", "config");
    cm.push_str(
        "data:
  # The overlay sets the environment's brokers.
  KAFKA_BOOTSTRAP_SERVERS: kafka-bootstrap:9093
  KAFKA_SECURITY_PROTOCOL: SASL_SSL
  KAFKA_SASL_MECHANISM: SCRAM-SHA-512
  KAFKA_SSL_CA_LOCATION: /etc/docflow/kafka/ca.crt
  SCHEMA_REGISTRY_URL: http://docflow-registry:8081
  DOCFLOW_OBJECT_DIR: /var/lib/docflow/objects
  DOCFLOW_LOG_FORMAT: json
  RUST_LOG: info
",
    );
    files.insert("base/common/configmap.yaml".into(), cm);
    let mut sa = format!(
        "{HEADER}apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: docflow\n  labels:\n"
    );
    labels(&mut sa, 4, "docflow", "identity");
    sa.push_str("automountServiceAccountToken: false\n");
    files.insert("base/common/serviceaccount.yaml".into(), sa);
    let mut pvc = format!(
        "{HEADER}# The object store: documents and derived artifacts (thumbnails), written by ingest and
# the stages, read by ingest. docflow's object store is a file system, so every replica
# mounts the same volume: it must be ReadWriteMany (NFS, CephFS, EFS, Filestore, ...).
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: docflow-objects
  labels:
"
    );
    labels(&mut pvc, 4, "docflow", "objects");
    pvc.push_str(
        "spec:
  accessModes:
    - ReadWriteMany
  resources:
    requests:
      storage: 100Gi
",
    );
    files.insert("base/common/objects.yaml".into(), pvc);
    let mut ta = format!(
        "{HEADER}# How KEDA's Kafka scaler reaches the brokers: SASL/SCRAM over TLS, from the secret
# docflow-kafka (keys sasl = scram_sha512, tls = enable, username, password, ca.crt).
apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata:
  name: docflow-kafka
  labels:
"
    );
    labels(&mut ta, 4, "docflow", "autoscaling");
    ta.push_str("spec:\n  secretTargetRef:\n");
    for (param, key) in [
        ("sasl", "sasl"),
        ("username", "username"),
        ("password", "password"),
        ("tls", "tls"),
        ("ca", "ca.crt"),
    ] {
        let _ = write!(
            ta,
            "    - parameter: {param}\n      name: docflow-kafka\n      key: {key}\n"
        );
    }
    files.insert("base/common/triggerauthentication.yaml".into(), ta);
    let _ = plan;
}
