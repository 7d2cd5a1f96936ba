use std::path::PathBuf;

use clap::Args;

/// The object store holding uploaded documents and derived artifacts (a local directory; the
/// same directory for every service of a stack).
#[derive(Debug, Clone, Args)]
pub struct ObjectStoreArgs {
    /// Directory of the local object store (created if missing).
    #[arg(
        id = "object_dir",
        long = "object-dir",
        env = "DOCFLOW_OBJECT_DIR",
        default_value = ".run/objects"
    )]
    pub dir: PathBuf,
}
