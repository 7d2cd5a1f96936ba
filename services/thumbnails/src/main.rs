//! `docflow-thumbnails`: see the library docs. The same binary is the stage's render worker
//! when the stage starts it as one.

fn main() -> anyhow::Result<()> {
    Ok(docflow_stage::main::<docflow_thumbnails::Thumbnails>()?)
}
