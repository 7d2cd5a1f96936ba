//! `docflow-ocr-embeddings`: see the library docs. The same binary is the stage's
//! page-reading worker when the stage starts it as one.

fn main() -> anyhow::Result<()> {
    Ok(docflow_stage::main::<docflow_ocr_embeddings::OcrEmbeddings>()?)
}
