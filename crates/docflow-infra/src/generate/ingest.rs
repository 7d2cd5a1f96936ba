//! `base/ingest`: the HTTP API's Deployment, Service, PodDisruptionBudget, HPA and Ingress.

use std::fmt::Write as _;

use super::common::{
    behavior, container_head, deployment_head, kustomization, labels, pdb, q, resources,
    secret_env, service, volumes,
};
use super::{DRAIN_MARGIN_S, Files, HEADER};
use crate::InfraError;
use crate::plan_file::{PlanFile, duration};

pub(super) fn ingest(plan: &PlanFile, files: &mut Files) -> Result<(), InfraError> {
    let name = "docflow-ingest";
    let max_wait = duration("ingest.max_wait", &plan.ingest.max_wait)?.as_secs();
    let idle_timeout = max_wait * 2;
    files.insert(
        "base/ingest/kustomization.yaml".into(),
        kustomization(&[
            "deployment.yaml",
            "service.yaml",
            "pdb.yaml",
            "hpa.yaml",
            "ingress.yaml",
        ]),
    );
    let mut d = format!(
        "{HEADER}# The HTTP API: validates, stores the bytes, records the job, produces doc.uploaded and
# answers 202. Long work never happens here, so replicas follow the request rate (hpa.yaml).
"
    );
    let grace = max_wait + DRAIN_MARGIN_S;
    deployment_head(
        &mut d,
        name,
        "ingest",
        None,
        grace,
        &format!(
            "      # SIGTERM: stop accepting, let requests finish (a `?wait=` request at most\n      # --max-wait, {max_wait} s), flush the producer; the grace period is that plus {DRAIN_MARGIN_S} s.\n"
        ),
        "",
    );
    container_head(&mut d, "ingest", "docflow-ingest", "http", 8080);
    let _ = write!(
        d,
        "            - name: DOCFLOW_INGEST_LISTEN
              value: 0.0.0.0:8080
            - name: DOCFLOW_INGEST_MAX_WAIT
              value: {mw}
            - name: DOCFLOW_INGEST_TOKENS_FILE
              value: /etc/docflow/tokens/tokens
            - name: DOCFLOW_INGEST_STAGES
              value: {stages}
            - name: DOCFLOW_EMBED_MODEL_DIR
              value: /opt/docflow/models/minilm
",
        mw = q(&plan.ingest.max_wait),
        stages = q(&plan
            .stages
            .iter()
            .filter(|s| s.results)
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(",")),
    );
    secret_env(&mut d, "            ", true);
    resources(&mut d, &plan.ingest.sizing, false);
    let _ = write!(
        d,
        "          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            periodSeconds: 10
          readinessProbe:
            # Broker metadata, database and object store reachable.
            httpGet:
              path: /readyz
              port: http
            periodSeconds: 5
          lifecycle:
            # Endpoints are removed asynchronously: keep serving a few seconds after
            # SIGTERM is decided so load balancers stop sending first.
            preStop:
              sleep:
                seconds: 5
          volumeMounts:
            - name: kafka-ca
              mountPath: /etc/docflow/kafka
              readOnly: true
            - name: tokens
              mountPath: /etc/docflow/tokens
              readOnly: true
            - name: objects
              mountPath: /var/lib/docflow/objects
",
    );
    volumes(&mut d, true, true);
    files.insert("base/ingest/deployment.yaml".into(), d);
    files.insert(
        "base/ingest/service.yaml".into(),
        service(name, "ingest", "http", 8080),
    );
    files.insert("base/ingest/pdb.yaml".into(), pdb(name, "ingest"));
    let mut h = format!(
        "{HEADER}# Ingest scales on its upload rate: {per:.0} uploads/s per replica ({by}).
# The metric comes from Prometheus through prometheus-adapter, with a rule such as:
#   - seriesQuery: 'docflow_ingest_request_duration_seconds_count{{route=\"/v1/documents\"}}'
#     resources: {{overrides: {{namespace: {{resource: namespace}}, pod: {{resource: pod}}}}}}
#     name: {{as: docflow_ingest_uploads_per_second}}
#     metricsQuery: 'sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[1m])) by (<<.GroupBy>>)'
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {name}
  labels:
",
        per = plan.ingest.uploads_per_second_per_replica,
        by = plan.ingest.measured_by,
    );
    labels(&mut h, 4, name, "ingest");
    let _ = write!(
        h,
        "spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {name}
  minReplicas: 2
  maxReplicas: 10
  metrics:
    - type: Pods
      pods:
        metric:
          name: docflow_ingest_uploads_per_second
        target:
          type: AverageValue
          averageValue: {target}
  behavior:
",
        target = q(&format!("{}", plan.ingest.uploads_per_second_per_replica)),
    );
    behavior(&mut h, "    ");
    files.insert("base/ingest/hpa.yaml".into(), h);
    let mut i = format!(
        "{HEADER}# Uploads are short but uneven (a 50 MiB PDF next to a 5 KiB one) and `?wait=` holds a
# request up to {max_wait} s: balance on outstanding requests, not round robin, and keep the
# idle timeout above the longest request ({idle_timeout} s = 2 × --max-wait).
#   ingress-nginx:   load-balance ewma (its closest to least-outstanding), proxy timeouts
#   AWS ALB:         least_outstanding_requests, idle_timeout
#   HAProxy ingress: leastconn, timeout-server
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  labels:
"
    );
    labels(&mut i, 4, name, "ingest");
    let _ = write!(
        i,
        "  annotations:
    nginx.ingress.kubernetes.io/load-balance: ewma
    nginx.ingress.kubernetes.io/proxy-read-timeout: \"{idle_timeout}\"
    nginx.ingress.kubernetes.io/proxy-send-timeout: \"{idle_timeout}\"
    nginx.ingress.kubernetes.io/proxy-body-size: 50m
    alb.ingress.kubernetes.io/target-group-attributes: load_balancing.algorithm.type=least_outstanding_requests
    alb.ingress.kubernetes.io/load-balancer-attributes: idle_timeout.timeout_seconds={idle_timeout}
    haproxy.org/load-balance: leastconn
    haproxy.org/timeout-server: {idle_timeout}s
spec:
  rules:
    # The overlay sets the host.
    - host: docflow.example.invalid
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: {name}
                port:
                  name: http
"
    );
    files.insert("base/ingest/ingress.yaml".into(), i);
    Ok(())
}
