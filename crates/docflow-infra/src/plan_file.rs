//! `infra/plan.yaml`: what the manifests are generated from — each stage's measured
//! service times and sizing, and per environment its peak rates, SLA, costs and budget.

use std::time::Duration;

use docflow_autoscale::plan::{Plan, PlanInput, plan};
use serde::Deserialize;

use crate::InfraError;

/// The whole plan file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Container image name (without tag) holding every docflow binary.
    pub image: String,
    /// Partitions of `doc.uploaded` (the most consumers that can work).
    pub partitions: u32,
    /// `--shutdown-grace` of every consumer (how long SIGTERM waits for in-flight records).
    pub shutdown_grace: String,
    /// `--commit-interval` of every consumer: the most a done record's offset waits before
    /// it is committed (Kafka's lag counts it meanwhile; lagThreshold adds its records).
    #[serde(default = "default_commit_interval")]
    pub commit_interval: String,
    /// Ingest.
    pub ingest: IngestSpec,
    /// The schema registry.
    pub registry: Sizing,
    /// Consumer stages, in the order they are written.
    pub stages: Vec<StageSpec>,
    /// Environments (one overlay each).
    pub environments: Vec<Environment>,
}

/// CPU and memory of a container.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sizing {
    /// CPU request (Kubernetes quantity).
    pub cpu: String,
    /// Memory request and limit (Kubernetes quantity).
    pub memory: String,
}

/// Ingest's sizing and its HPA target.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSpec {
    /// CPU and memory.
    #[serde(flatten)]
    pub sizing: Sizing,
    /// Uploads/s one replica takes at its target utilisation (the HPA's target).
    pub uploads_per_second_per_replica: f64,
    /// How the figure was measured.
    pub measured_by: String,
    /// `--max-wait` (the longest `?wait=`): load balancers' idle timeout must exceed it.
    pub max_wait: String,
}

/// One consumer stage.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    /// Consumer group, and the name of its manifests (`docflow-<name>`).
    pub name: String,
    /// Binary in the image.
    pub binary: String,
    /// Topics the group reads (one KEDA trigger each).
    pub topics: Vec<String>,
    /// Measured median service time.
    pub p50: String,
    /// Measured 99th percentile service time.
    pub p99: String,
    /// The command that measured them.
    pub measured_by: String,
    /// From asking for a replica to it serving (image pull, model load, group join).
    pub cold_start: String,
    /// Alert when the group's lag in seconds stays above this.
    pub lag_alert: String,
    /// CPU and memory.
    #[serde(flatten)]
    pub sizing: Sizing,
    /// Needs a GPU (`nvidia.com/gpu`, node selector, toleration).
    #[serde(default)]
    pub gpu: bool,
    /// Scale ahead of the lag on ingest's upload rate (KEDA's Prometheus scaler).
    #[serde(default)]
    pub rate_trigger: bool,
    /// Records a result for each document (a stage on the stage layer): ingest's jobs
    /// report it and `?wait=` waits for it (`DOCFLOW_INGEST_STAGES`). `false` for a group
    /// that only reads the pipeline (the analytics rollup).
    #[serde(default = "yes")]
    pub results: bool,
    /// Further environment variables of the container.
    #[serde(default)]
    pub env: Vec<EnvVar>,
}

/// A plain environment variable.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

/// One environment: an overlay.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// Overlay folder name.
    pub name: String,
    /// Namespace everything goes to.
    pub namespace: String,
    /// Image tag.
    pub image_tag: String,
    /// The image's manifest digest (`sha256:` and 64 hex digits; `make image` writes it to
    /// `dist/docflow-VERSION.digest`): pins the exact image, whatever the tag points at later.
    #[serde(default)]
    pub image_digest: Option<String>,
    /// Kafka bootstrap servers.
    pub kafka_bootstrap: String,
    /// Prometheus the KEDA rate trigger queries.
    pub prometheus: String,
    /// OTLP/HTTP collector every service exports spans to (none: no export).
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// Host of ingest's Ingress.
    pub host: String,
    /// Ingest's replicas.
    pub ingest_replicas: MinMax,
    /// Per stage, by name.
    pub stages: Vec<EnvStage>,
}

/// Fewest and most replicas.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinMax {
    /// Fewest.
    pub min: u32,
    /// Most.
    pub max: u32,
}

/// A stage's load and money in one environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvStage {
    /// Stage name.
    pub name: String,
    /// Peak arrival rate, records/s.
    pub peak_rate: f64,
    /// Waiting-time SLA.
    pub sla_wait: String,
    /// Cost of one replica per hour.
    pub replica_cost_per_hour: f64,
    /// Budget per day.
    pub budget_per_day: f64,
    /// Service times measured on this environment's hardware, where they differ from the
    /// stage's (a GPU node against a CPU one): p50, p99 and how they were measured.
    #[serde(default)]
    pub measured: Option<Measured>,
    /// This environment's cold start, where it differs from the stage's.
    #[serde(default)]
    pub cold_start: Option<String>,
    /// `false`: a GPU stage runs on CPU nodes here (no GPU request, selector, toleration).
    #[serde(default)]
    pub gpu: Option<bool>,
}

/// Service times and their provenance.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// Median service time.
    pub p50: String,
    /// 99th percentile service time.
    pub p99: String,
    /// The command that measured them.
    pub measured_by: String,
}

/// A stage's plan in one environment, with what it came from.
#[derive(Debug, Clone)]
pub struct StagePlan {
    /// The derived settings.
    pub plan: Plan,
    /// What they were derived from.
    pub input: PlanInput,
    /// Median service time, as written in the plan.
    pub p50: String,
    /// 99th percentile, as written.
    pub p99: String,
    /// How they were measured.
    pub measured_by: String,
}

fn default_commit_interval() -> String {
    "100ms".to_owned()
}

fn yes() -> bool {
    true
}

pub(crate) fn duration(field: &str, text: &str) -> Result<Duration, InfraError> {
    humantime::parse_duration(text).map_err(|e| InfraError::Plan(format!("{field}: {text:?}: {e}")))
}

impl PlanFile {
    /// Reads and checks a plan file.
    pub fn parse(text: &str) -> Result<Self, InfraError> {
        let file: PlanFile =
            serde_yaml::from_str(text).map_err(|e| InfraError::Plan(e.to_string()))?;
        file.check()?;
        Ok(file)
    }

    fn check(&self) -> Result<(), InfraError> {
        duration("shutdown_grace", &self.shutdown_grace)?;
        duration("commit_interval", &self.commit_interval)?;
        duration("ingest.max_wait", &self.ingest.max_wait)?;
        if self.environments.is_empty() || self.stages.is_empty() {
            return Err(InfraError::Plan(
                "a plan needs at least one stage and one environment".into(),
            ));
        }
        for env in &self.environments {
            if let Some(digest) = &env.image_digest
                && !digest.strip_prefix("sha256:").is_some_and(|hex| {
                    hex.len() == 64
                        && hex
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                })
            {
                return Err(InfraError::Plan(format!(
                    "{}: image_digest {digest:?} is not sha256: and 64 lowercase hex digits",
                    env.name
                )));
            }
            if env.ingest_replicas.min == 0 || env.ingest_replicas.min > env.ingest_replicas.max {
                return Err(InfraError::Plan(format!(
                    "{}: ingest_replicas needs 1 <= min <= max",
                    env.name
                )));
            }
            for stage in &self.stages {
                self.stage_plan(env, stage)?;
            }
            for s in &env.stages {
                if !self.stages.iter().any(|st| st.name == s.name) {
                    return Err(InfraError::Plan(format!(
                        "{}: no stage named {:?}",
                        env.name, s.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The stage's plan in `env`.
    pub fn stage_plan(
        &self,
        env: &Environment,
        stage: &StageSpec,
    ) -> Result<StagePlan, InfraError> {
        let e = env
            .stages
            .iter()
            .find(|s| s.name == stage.name)
            .ok_or_else(|| {
                InfraError::Plan(format!(
                    "{}: no figures for stage {:?}",
                    env.name, stage.name
                ))
            })?;
        let (p50, p99, measured_by) = match &e.measured {
            Some(m) => (&m.p50, &m.p99, &m.measured_by),
            None => (&stage.p50, &stage.p99, &stage.measured_by),
        };
        let cold_start = e.cold_start.as_ref().unwrap_or(&stage.cold_start);
        let input = PlanInput {
            p50_s: duration("p50", p50)?.as_secs_f64(),
            p99_s: duration("p99", p99)?.as_secs_f64(),
            sla_wait_s: duration("sla_wait", &e.sla_wait)?.as_secs_f64(),
            commit_interval_s: duration("commit_interval", &self.commit_interval)?.as_secs_f64(),
            peak_rate: e.peak_rate,
            replica_cost_per_hour: e.replica_cost_per_hour,
            budget_per_day: e.budget_per_day,
            cold_start_s: duration("cold_start", cold_start)?.as_secs_f64(),
            partitions: self.partitions,
        };
        let plan = plan(&input)
            .map_err(|e| InfraError::Plan(format!("{}/{}: {e}", env.name, stage.name)))?;
        Ok(StagePlan {
            plan,
            input,
            p50: p50.clone(),
            p99: p99.clone(),
            measured_by: measured_by.clone(),
        })
    }
}
