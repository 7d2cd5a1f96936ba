//! `docflow infra`: generate `infra/` from its plan, render an overlay, validate every
//! overlay against the committed schemas.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use docflow_infra::plan_file::PlanFile;

#[derive(Debug, Subcommand)]
pub(crate) enum InfraCommand {
    /// Write infra/base and infra/overlays from infra/plan.yaml (or, with --check, say
    /// what differs and fail).
    Generate {
        /// The infra folder (holds plan.yaml).
        #[arg(long, default_value = "infra")]
        dir: PathBuf,
        /// Do not write: list the files that differ from the plan and fail if any.
        #[arg(long)]
        check: bool,
    },
    /// Print an overlay's manifests as `kustomize build` would.
    Render {
        /// The overlay (a folder with a kustomization.yaml).
        overlay: PathBuf,
    },
    /// Render every overlay and check each manifest against infra/schemas.
    Validate {
        /// The infra folder.
        #[arg(long, default_value = "infra")]
        dir: PathBuf,
    },
}

pub(crate) fn run(cmd: InfraCommand) -> anyhow::Result<()> {
    match cmd {
        InfraCommand::Generate { dir, check } => {
            let plan_path = dir.join("plan.yaml");
            let text = std::fs::read_to_string(&plan_path)
                .with_context(|| format!("reading {}", plan_path.display()))?;
            let plan = PlanFile::parse(&text)?;
            let files = docflow_infra::generate::generate(&plan)?;
            if check {
                let drift = docflow_infra::check(&files, &dir)?;
                if drift.is_empty() {
                    println!("{} files match {}", files.len(), plan_path.display());
                    return Ok(());
                }
                for d in &drift {
                    println!("{d}");
                }
                anyhow::bail!(
                    "{} files drifted from the plan: run `docflow infra generate`",
                    drift.len()
                );
            }
            docflow_infra::write(&files, &dir)?;
            println!("wrote {} files under {}", files.len(), dir.display());
            Ok(())
        }
        InfraCommand::Render { overlay } => {
            let docs = docflow_infra::render::render(&overlay)?;
            print!("{}", docflow_infra::render::to_yaml(&docs)?);
            Ok(())
        }
        InfraCommand::Validate { dir } => {
            let schemas = docflow_infra::validate::Schemas::load(&dir.join("schemas"))?;
            let mut failed = 0;
            for overlay in docflow_infra::overlays(&dir)? {
                let docs = docflow_infra::render::render(&overlay)?;
                let mut problems = Vec::new();
                for d in &docs {
                    problems.extend(schemas.validate(d));
                }
                if problems.is_empty() {
                    println!("{}: {} manifests valid", overlay.display(), docs.len());
                } else {
                    failed += problems.len();
                    for p in problems {
                        println!("{}: {p}", overlay.display());
                    }
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} problems");
            }
            Ok(())
        }
    }
}
