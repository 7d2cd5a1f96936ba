//! The blob store: document bytes and derived artifacts (thumbnails, ...) in a local
//! directory through `object_store`, the same directory for every service of a stack.
//!
//! Keys are built by the server from path segments (tenant, document id, stage, version), each
//! segment escaped, so no user input names a path. Events carry `file://` URIs of blobs; a
//! reader turns one back into a key with [`Blobs::key_of`], which refuses anything outside
//! the store, so a forged event cannot make a stage read an arbitrary file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, PutPayload};

use spares::Spares;

mod check;
mod commit;
mod durable;
mod keys;
mod spares;
mod staged;
#[cfg(test)]
mod test_support;

pub use check::Checked;
pub use commit::Committed;
pub use durable::Syncing;
pub use staged::Staged;

/// Blob store failures.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The store's directory cannot be created or opened.
    #[error("object store directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A URI that names no blob of this store (other scheme, outside the root, malformed).
    #[error("{uri:?} is not a blob of this object store: {reason}")]
    Foreign {
        /// The URI.
        uri: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The store failed (I/O); usually worth retrying.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// Writing or moving a staged blob failed.
    #[error("staged blob {path}: {source}")]
    Staging {
        /// The staged file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A local object store rooted at one directory.
#[derive(Debug, Clone)]
pub struct Blobs {
    store: Arc<LocalFileSystem>,
    root: PathBuf,
    spares: Option<Arc<Spares>>,
}

impl Blobs {
    /// Opens (creating if missing) the store at `dir`.
    pub fn open(dir: &Path) -> Result<Self, BlobError> {
        let io = |source| BlobError::Dir {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let root = dir.canonicalize().map_err(io)?;
        let store = LocalFileSystem::new_with_prefix(&root)?;
        Ok(Blobs {
            store: Arc::new(store),
            root,
            spares: None,
        })
    }

    /// The store's directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `bytes` under `key` (atomically: readers see the old or the new blob).
    pub async fn put(&self, key: &Key, bytes: Bytes) -> Result<(), BlobError> {
        self.store.put(key, PutPayload::from(bytes)).await?;
        Ok(())
    }

    /// The blob under `key`, or `None` when there is none.
    pub async fn get(&self, key: &Key) -> Result<Option<Bytes>, BlobError> {
        match self.store.get(key).await {
            Ok(r) => Ok(Some(r.bytes().await?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
