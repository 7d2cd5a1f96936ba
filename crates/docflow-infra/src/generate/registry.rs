//! `base/registry`: the schema registry's Deployment, Service and PodDisruptionBudget.

use std::fmt::Write as _;

use super::common::{
    container_head, deployment_head, kustomization, pdb, resources, secret_env, service,
};
use super::{Files, HEADER};
use crate::plan_file::PlanFile;

pub(super) fn registry(plan: &PlanFile, files: &mut Files) {
    let name = "docflow-registry";
    files.insert(
        "base/registry/kustomization.yaml".into(),
        kustomization(&["deployment.yaml", "service.yaml", "pdb.yaml"]),
    );
    let mut d = format!(
        "{HEADER}# The schema registry (Confluent's REST API); its state is in PostgreSQL, so replicas are
# interchangeable. Readers cache schemas by id: two replicas are plenty.
"
    );
    deployment_head(
        &mut d,
        name,
        "registry",
        Some(2),
        20,
        "      # SIGTERM: in-flight requests finish, then it exits (seconds).\n",
        "",
    );
    container_head(&mut d, "registry", "docflow-registry", "http", 8081);
    let _ = write!(
        d,
        "            - name: DOCFLOW_REGISTRY_LISTEN
              value: 0.0.0.0:8081
"
    );
    secret_env(&mut d, "            ", true);
    resources(&mut d, &plan.registry, false);
    let _ = write!(
        d,
        "          livenessProbe:
            httpGet:
              path: /
              port: http
            periodSeconds: 10
          readinessProbe:
            # Reads the database: not ready while PostgreSQL is unreachable.
            httpGet:
              path: /subjects
              port: http
            periodSeconds: 5
",
    );
    files.insert("base/registry/deployment.yaml".into(), d);
    files.insert(
        "base/registry/service.yaml".into(),
        service(name, "registry", "http", 8081),
    );
    files.insert("base/registry/pdb.yaml".into(), pdb(name, "registry"));
}
