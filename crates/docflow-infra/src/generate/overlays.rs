//! `overlays/<env>`: the namespace, image tag, Kafka and Prometheus of an environment, and
//! the patches its scaling plan derives (ScaledObjects, `max.poll.interval.ms`, ingest's
//! replicas).

use std::fmt::Write as _;

use super::common::q;
use super::stages::kafka_triggers;
use super::{Files, HEADER};
use crate::InfraError;
use crate::plan_file::{Environment, PlanFile, StagePlan, StageSpec};

fn plan_comment(out: &mut String, env: &Environment, stage: &StageSpec, p: &StagePlan) {
    let i = &p.input;
    let pl = &p.plan;
    let _ = write!(
        out,
        "# {s} in {e}: p50 {p50}, p99 {p99} (measured: {by}); SLA wait {sla:.3} s; peak {peak} records/s;
# cold start {cold:.0} s; {cost} per replica-hour, budget {budget} per day; {parts} partitions.
#   μ = 1/p50 = {mu:.2} records/s per replica; lagThreshold = μ × (SLA wait + commit interval {ci:.3} s) = {lt}
#   safe utilisation {rho:.2} (Kingman, service-time c² {cv2:.2}); the peak needs {peak_r} replicas
#   minReplicas {min}, maxReplicas {max} (limited by the {lim}); floor cost {floor:.2} per day
#   max.poll.interval.ms {mpi}
",
        s = stage.name,
        e = env.name,
        p50 = p.p50,
        p99 = p.p99,
        by = p.measured_by,
        sla = i.sla_wait_s,
        ci = i.commit_interval_s,
        peak = i.peak_rate,
        cold = i.cold_start_s,
        cost = i.replica_cost_per_hour,
        budget = i.budget_per_day,
        parts = i.partitions,
        mu = pl.service_rate,
        lt = pl.lag_threshold,
        rho = pl.safe_utilisation,
        cv2 = pl.service_cv2,
        peak_r = pl.peak_replicas,
        min = pl.min_replicas,
        max = pl.max_replicas,
        lim = pl.max_limited_by,
        floor = pl.floor_cost_per_day,
        mpi = pl.max_poll_interval_ms,
    );
    if !pl.peak_fits {
        let _ = writeln!(
            out,
            "#   WARNING: the peak needs {} replicas, more than maxReplicas {}",
            pl.peak_replicas, pl.max_replicas
        );
    }
}

pub(super) fn overlay(
    plan: &PlanFile,
    env: &Environment,
    files: &mut Files,
) -> Result<(), InfraError> {
    let dir = format!("overlays/{}", env.name);
    let mut patches = vec![
        "patches/config.yaml".to_owned(),
        "patches/ingest.yaml".to_owned(),
        "patches/ingress.yaml".to_owned(),
    ];
    let mut k = format!(
        "{HEADER}apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {ns}
resources:
  - ../../base
images:
  - name: docflow
    newName: {image}
    newTag: {tag}
",
        ns = env.namespace,
        image = plan.image,
        tag = q(&env.image_tag),
    );
    // A digest pins the image: kustomize writes `name:tag@digest`.
    if let Some(digest) = &env.image_digest {
        let _ = writeln!(k, "    digest: {digest}");
    }
    let mut cfg = format!(
        "{HEADER}apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: docflow-config\ndata:\n  KAFKA_BOOTSTRAP_SERVERS: {}\n",
        q(&env.kafka_bootstrap)
    );
    if env.name == "dev" {
        cfg.push_str("  RUST_LOG: info,docflow=debug\n");
    }
    if let Some(otlp) = &env.otlp_endpoint {
        // Every service exports its spans; service.name is each binary's name.
        let _ = writeln!(cfg, "  OTEL_EXPORTER_OTLP_ENDPOINT: {}", q(otlp));
        let _ = writeln!(
            cfg,
            "  OTEL_RESOURCE_ATTRIBUTES: {}",
            q(&format!("deployment.environment={}", env.name))
        );
    }
    files.insert(format!("{dir}/patches/config.yaml"), cfg);
    files.insert(
        format!("{dir}/patches/ingest.yaml"),
        format!(
            "{HEADER}apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: docflow-ingest\nspec:\n  minReplicas: {}\n  maxReplicas: {}\n",
            env.ingest_replicas.min, env.ingest_replicas.max
        ),
    );
    files.insert(
        format!("{dir}/patches/ingress.yaml"),
        format!(
            "{HEADER}apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: docflow-ingest
spec:
  rules:
    - host: {host}
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: docflow-ingest
                port:
                  name: http
",
            host = env.host
        ),
    );
    for stage in &plan.stages {
        let p = plan.stage_plan(env, stage)?;
        let name = format!("docflow-{}", stage.name);
        let mut so = HEADER.to_owned();
        plan_comment(&mut so, env, stage, &p);
        let _ = write!(
            so,
            "apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {name}
spec:
  minReplicaCount: {min}
  maxReplicaCount: {max}
  triggers:
",
            min = p.plan.min_replicas,
            max = p.plan.max_replicas,
        );
        kafka_triggers(&mut so, stage, p.plan.lag_threshold);
        if stage.rate_trigger {
            let per_replica = p.plan.service_rate * p.plan.safe_utilisation;
            let _ = write!(
                so,
                "    # Leading indicator: the events ingest produces (new uploads acknowledged by the broker),
    # so scale-up starts before the lag builds.
    # Target μ × safe utilisation = {per_replica:.2} records/s per replica.
    - type: prometheus
      name: upload-rate
      metadata:
        serverAddress: {server}
        query: sum(rate(docflow_ingest_produce_duration_seconds_count{{namespace=\"{ns}\",result=\"ok\"}}[1m]))
        threshold: \"{per_replica:.2}\"
        activationThreshold: \"0\"
",
                server = q(&env.prometheus),
                ns = env.namespace,
            );
        }
        let file = format!("patches/{}-scaledobject.yaml", stage.name);
        files.insert(format!("{dir}/{file}"), so);
        patches.push(file);
        let mut dp = HEADER.to_owned();
        let _ = write!(
            dp,
            "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  template:
    spec:
      containers:
        - name: {s}
          env:
            - name: KAFKA_MAX_POLL_INTERVAL
              value: {mpi}ms
",
            s = stage.name,
            mpi = p.plan.max_poll_interval_ms,
        );
        let env_stage = env.stages.iter().find(|e| e.name == stage.name);
        if stage.gpu && env_stage.is_some_and(|e| e.gpu == Some(false)) {
            // This environment runs the stage on CPU nodes: no GPU request, selector or
            // toleration (the binary picks its CPU path at run time).
            dp.push_str("      nodeSelector: null\n      tolerations: null\n");
            let at = dp.find("          env:").unwrap_or(dp.len());
            dp.insert_str(
                at,
                "          resources:\n            limits:\n              nvidia.com/gpu: null\n",
            );
        }
        let file = format!("patches/{}-deployment.yaml", stage.name);
        files.insert(format!("{dir}/{file}"), dp);
        patches.push(file);
    }
    k.push_str("patches:\n");
    for p in &patches {
        let _ = writeln!(k, "  - path: {p}");
    }
    files.insert(format!("{dir}/kustomization.yaml"), k);
    Ok(())
}
