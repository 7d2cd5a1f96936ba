//! `base/monitoring`: the PodMonitor and the PrometheusRule with docflow's alerts.

use std::fmt::Write as _;

use super::common::{kustomization, labels};
use super::{Files, HEADER, METRICS_PORT};
use crate::InfraError;
use crate::plan_file::{PlanFile, duration};

pub(super) fn monitoring(plan: &PlanFile, files: &mut Files) -> Result<(), InfraError> {
    files.insert(
        "base/monitoring/kustomization.yaml".into(),
        kustomization(&["podmonitor.yaml", "prometheusrule.yaml"]),
    );
    let mut pm = format!(
        "{HEADER}# Prometheus (Operator) scrapes ingest (port http) and every consumer (port metrics); the
# rate trigger, the alerts and the dashboards read these series.
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: docflow
  labels:
"
    );
    labels(&mut pm, 4, "docflow", "monitoring");
    pm.push_str("spec:\n  selector:\n    matchExpressions:\n      - key: app.kubernetes.io/component\n        operator: In\n        values:\n          - ingest\n");
    for stage in &plan.stages {
        let _ = writeln!(pm, "          - {}", stage.name);
    }
    pm.push_str(
        "  podMetricsEndpoints:
    - port: http
      path: /metrics
      interval: 15s
    - port: metrics
      path: /metrics
      interval: 15s
",
    );
    files.insert("base/monitoring/podmonitor.yaml".into(), pm);
    let mut r = format!(
        "{HEADER}# Alerts over the metrics every docflow consumer exports (/metrics on port {METRICS_PORT}) and
# kube-state-metrics' HPA series (replicas pinned at max).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: docflow
  labels:
"
    );
    labels(&mut r, 4, "docflow", "monitoring");
    r.push_str(
        "spec:
  groups:
    - name: docflow
      rules:
        # The seed: alert when anything lands in a dead-letter topic.
        - alert: DocflowDeadLettered
          expr: sum by (namespace, group) (increase(docflow_consumer_messages_total{outcome=\"dead_lettered\"}[5m])) > 0
          labels:
            severity: warning
          annotations:
            summary: Records of group {{ $labels.group }} went to its dead-letter topic
            description: \"{{ $value }} records in 5 minutes. Read them with `docflow replay dlq`, fix, then redrive.\"
        - alert: DocflowDeadLetterWriteFailing
          expr: sum by (namespace, group) (increase(docflow_consumer_dlq_write_errors_total[5m])) > 0
          labels:
            severity: critical
          annotations:
            summary: Group {{ $labels.group }} cannot write its dead-letter topic; its partitions wait
        # Burrow's STALL/STOP: the group has lag but handles nothing.
        - alert: DocflowGroupStalled
          expr: (sum by (namespace, group) (rate(docflow_consumer_messages_total[10m])) == 0) and on (namespace, group) (max by (namespace, group) (docflow_consumer_lag_records) > 0)
          for: 10m
          labels:
            severity: critical
          annotations:
            summary: Group {{ $labels.group }} has lag and has handled nothing for 10 minutes
        # Burrow's verdict as ingest's console samples it (docflow_consumer_status: 2 WARN,
        # 3 ERR): a partition stopped, stalled or rewound, or a lag that never falls.
        - alert: DocflowConsumerError
          expr: max by (namespace, group) (docflow_consumer_status) >= 3
          for: 2m
          labels:
            severity: critical
          annotations:
            summary: \"Group {{ $labels.group }} is ERR: a partition stopped, stalled or rewound (docflow status --group {{ $labels.group }} says which and why)\"
        - alert: DocflowConsumerLagNotFalling
          expr: max by (namespace, group) (docflow_consumer_status) == 2
          for: 10m
          labels:
            severity: warning
          annotations:
            summary: \"Group {{ $labels.group }} is WARN: its lag has not fallen over the health window for 10 minutes\"
        # Replicas pinned at the maximum: the plan's peak was exceeded or service times grew.
        - alert: DocflowReplicasAtMax
          expr: kube_horizontalpodautoscaler_status_current_replicas{horizontalpodautoscaler=~\"keda-hpa-docflow-.*|docflow-ingest\"} >= on (namespace, horizontalpodautoscaler) kube_horizontalpodautoscaler_spec_max_replicas
          for: 15m
          labels:
            severity: warning
          annotations:
            summary: \"{{ $labels.horizontalpodautoscaler }} has been at its maximum replicas for 15 minutes: re-run docflow calibrate and docflow plan\"
",
    );
    for stage in &plan.stages {
        let secs = duration("lag_alert", &stage.lag_alert)?.as_secs();
        let _ = write!(
            r,
            "        - alert: DocflowLagAboveSla
          expr: max by (namespace, group) (docflow_consumer_lag_seconds{{group=\"{g}\"}}) > {secs}
          for: 5m
          labels:
            severity: warning
          annotations:
            summary: \"Group {g} is more than {lag} behind\"
        - alert: DocflowGroupAbsent
          expr: absent(docflow_consumer_assigned_partitions{{group=\"{g}\"}})
          for: 5m
          labels:
            severity: critical
          annotations:
            summary: \"No replica of group {g} reports partitions\"
",
            g = stage.name,
            lag = stage.lag_alert,
        );
    }
    files.insert("base/monitoring/prometheusrule.yaml".into(), r);
    Ok(())
}
