//! `base/<stage>`: each stage's Deployment, Service, PodDisruptionBudget and KEDA
//! ScaledObject, and the Kafka lag triggers the overlays patch in too.

use std::fmt::Write as _;

use super::common::{
    behavior, container_head, deployment_head, kustomization, labels, pdb, q, resources,
    secret_env, service, volumes,
};
use super::{DRAIN_MARGIN_S, Files, HEADER, METRICS_PORT};
use crate::InfraError;
use crate::plan_file::{PlanFile, StageSpec, duration};

/// The longest shutdown grace a stage gets from its p99: a rolling deploy waits this long
/// per replica at most. A record longer than that is interrupted (its claim released, its
/// pages kept) and continues on another replica.
const MAX_STAGE_GRACE_S: u64 = 600;

/// A stage's `--shutdown-grace`: its measured p99 service time (a record taken just before
/// SIGTERM finishes), at least the plan's `shutdown_grace`, at most [`MAX_STAGE_GRACE_S`].
fn stage_grace(plan: &PlanFile, stage: &StageSpec) -> Result<u64, InfraError> {
    let floor = duration("shutdown_grace", &plan.shutdown_grace)?.as_secs();
    let p99 = duration("p99", &stage.p99)?;
    let p99 = p99.as_secs() + u64::from(p99.subsec_nanos() > 0);
    Ok(p99.max(floor).min(MAX_STAGE_GRACE_S.max(floor)))
}

pub(super) fn stage_base(
    plan: &PlanFile,
    stage: &StageSpec,
    files: &mut Files,
) -> Result<(), InfraError> {
    let name = format!("docflow-{}", stage.name);
    let dir = format!("base/{}", stage.name);
    let stage_grace_s = stage_grace(plan, stage)?;
    let grace_s = stage_grace_s + DRAIN_MARGIN_S;
    let cold = duration("cold_start", &stage.cold_start)?.as_secs();
    files.insert(
        format!("{dir}/kustomization.yaml"),
        kustomization(&[
            "deployment.yaml",
            "service.yaml",
            "pdb.yaml",
            "scaledobject.yaml",
        ]),
    );
    let mut d = format!(
        "{HEADER}# Consumer group `{g}` on {topics}. KEDA scales it on the group's lag
# (scaledobject.yaml); each replica is one member with one pooled work queue.
",
        g = stage.name,
        topics = stage.topics.join(", "),
    );
    deployment_head(
        &mut d,
        &name,
        &stage.name,
        None,
        grace_s,
        &format!(
            "      # SIGTERM drains: the runtime stops taking records, lets those in flight finish for
      # --shutdown-grace ({stage_grace_s}s: the stage's p99 {p99}, at least the plan's {floor}, at
      # most {MAX_STAGE_GRACE_S}s), commits the contiguous watermark and leaves the group — no
      # preStop hook is needed. A record still running then is interrupted, not counted as a
      # crash, and redelivered (a long scan continues from its pages already kept). The grace
      # period adds {DRAIN_MARGIN_S} s for the commit, the producer flush and the LeaveGroup.
",
            p99 = stage.p99,
            floor = plan.shutdown_grace,
        ),
        if stage.gpu {
            "      nodeSelector:\n        nvidia.com/gpu.present: \"true\"\n      tolerations:\n        - key: nvidia.com/gpu\n          operator: Exists\n          effect: NoSchedule\n"
        } else {
            ""
        },
    );
    container_head(&mut d, &stage.name, &stage.binary, "metrics", METRICS_PORT);
    let _ = write!(
        d,
        "            - name: DOCFLOW_METRICS_LISTEN
              value: 0.0.0.0:{METRICS_PORT}
            - name: DOCFLOW_SHUTDOWN_GRACE
              value: {grace}
            # The plan's commit interval: lagThreshold counts its records (done, not committed).
            - name: DOCFLOW_COMMIT_INTERVAL
              value: {commit}
            # The overlay sets it from the plan (10 × p99, at least 300 s).
            - name: KAFKA_MAX_POLL_INTERVAL
              value: 300s
",
        grace = q(&format!("{stage_grace_s}s")),
        commit = q(&plan.commit_interval),
    );
    for e in &stage.env {
        let _ = write!(
            d,
            "            - name: {}\n              value: {}\n",
            e.name,
            q(&e.value)
        );
    }
    secret_env(&mut d, "            ", true);
    resources(&mut d, &stage.sizing, stage.gpu);
    let _ = write!(
        d,
        "          startupProbe:
            # Model loading and joining the group: up to the planned cold start ({cold} s).
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 5
            failureThreshold: {fails}
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            periodSeconds: 5
          volumeMounts:
            - name: kafka-ca
              mountPath: /etc/docflow/kafka
              readOnly: true
            - name: objects
              mountPath: /var/lib/docflow/objects
",
        fails = cold.div_ceil(5).max(6),
    );
    volumes(&mut d, true, false);
    files.insert(format!("{dir}/deployment.yaml"), d);
    files.insert(
        format!("{dir}/service.yaml"),
        service(&name, &stage.name, "metrics", METRICS_PORT),
    );
    files.insert(format!("{dir}/pdb.yaml"), pdb(&name, &stage.name));
    let mut so = format!(
        "{HEADER}# KEDA scales the group on its lag. The overlay patches in the plan's figures
# (min/max replicas, lagThreshold, the rate trigger); these are safe defaults.
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: {name}
  labels:
"
    );
    labels(&mut so, 4, &name, &stage.name);
    let _ = write!(
        so,
        "spec:
  scaleTargetRef:
    name: {name}
  pollingInterval: 15
  cooldownPeriod: 300
  minReplicaCount: 1
  maxReplicaCount: {max}
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
",
        max = plan.partitions,
    );
    behavior(&mut so, "        ");
    so.push_str("  triggers:\n");
    kafka_triggers(&mut so, stage, 10);
    files.insert(format!("{dir}/scaledobject.yaml"), so);
    Ok(())
}

pub(super) fn kafka_triggers(out: &mut String, stage: &StageSpec, lag_threshold: u64) {
    for topic in &stage.topics {
        let _ = write!(
            out,
            "    - type: kafka
      name: lag-{topic_name}
      authenticationRef:
        name: docflow-kafka
      metadata:
        bootstrapServersFromEnv: KAFKA_BOOTSTRAP_SERVERS
        consumerGroup: {group}
        topic: {topic}
        lagThreshold: \"{lag_threshold}\"
        activationLagThreshold: \"0\"
        # docflow's consumers start a new group at the earliest offset.
        offsetResetPolicy: earliest
        allowIdleConsumers: \"false\"
",
            topic_name = topic.replace('.', "-"),
            group = stage.name,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stage's grace is its p99, within the plan's floor and the cap.
    #[test]
    fn a_stage_grace_period_fits_its_p99_within_the_floor_and_the_cap() {
        let mut plan = PlanFile::parse(include_str!("../../../../infra/plan.yaml")).unwrap();
        let mut stage = plan.stages[0].clone();
        for (p99, want) in [
            ("58ms", 30),
            ("29500ms", 30),
            ("45s", 45),
            ("90500ms", 91),
            ("20m", 600),
        ] {
            stage.p99 = p99.to_owned();
            assert_eq!(stage_grace(&plan, &stage).unwrap(), want, "{p99}");
        }
        // A floor over the cap wins: the plan asked for it.
        plan.shutdown_grace = "15m".to_owned();
        assert_eq!(stage_grace(&plan, &stage).unwrap(), 900);
    }
}
