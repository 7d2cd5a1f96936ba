//! The blob store: document bytes and derived artifacts (thumbnails, ...) in a local
//! directory through `object_store`, the same directory for every service of a stack.
//!
//! Keys are built by the server from path segments (tenant, document id, stage, version), each
//! segment escaped, so no user input names a path. Events carry `file://` URIs of blobs; a
//! reader turns one back into a key with [`Blobs::key_of`], which refuses anything outside
//! the store, so a forged event cannot make a stage read an arbitrary file.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, PutPayload};

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

/// Where blobs being received are written before they have a key: a directory of the store's
/// root (the same file system, so committing is one rename). Staged files are named by a
/// 32-digit UUID and a document's key ends in a 64-digit hash, so even a tenant named
/// `.incoming` could never name a staged file.
const INCOMING: &str = ".incoming";

/// A blob being written before its key is known (an upload is keyed by the hash of its
/// bytes, known only at the end). Bytes go to a file in the store's directory as they arrive,
/// so a slow or large upload holds a file, not memory. [`Staged::commit`] moves it under its
/// key atomically; dropping it uncommitted removes the file.
#[derive(Debug)]
pub struct Staged {
    file: Option<tokio::fs::File>,
    path: PathBuf,
    len: u64,
    committed: bool,
}

impl Staged {
    fn io(&self, source: std::io::Error) -> BlobError {
        BlobError::Staging {
            path: self.path.clone(),
            source,
        }
    }

    /// Appends `chunk`.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), BlobError> {
        use tokio::io::AsyncWriteExt;
        let Some(file) = self.file.as_mut() else {
            return Err(self.io(std::io::Error::other("already finished")));
        };
        let written = file.write_all(chunk).await;
        written.map_err(|e| self.io(e))?;
        self.len += chunk.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The staged file (to read it back for checks before committing).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the bytes to disk; the blob can be read back from [`Staged::path`] after.
    pub async fn finish(&mut self) -> Result<(), BlobError> {
        use tokio::io::AsyncWriteExt;
        if let Some(mut file) = self.file.take() {
            let flushed = async {
                file.flush().await?;
                file.sync_data().await
            }
            .await;
            flushed.map_err(|e| self.io(e))?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: an uncommitted upload (refused, timed out, duplicate) leaves nothing.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A local object store rooted at one directory.
#[derive(Debug, Clone)]
pub struct Blobs {
    store: Arc<LocalFileSystem>,
    root: PathBuf,
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
        })
    }

    /// The store's directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The key made of `segments`, each escaped (a `/` inside a segment does not nest).
    pub fn key<'a>(segments: impl IntoIterator<Item = &'a str>) -> Key {
        Key::from_iter(segments)
    }

    /// Whether `key` lies under the top-level segment `owner`: ingest keeps a tenant's
    /// documents under `<tenant>/...`, so a stage checks an event's tenant against its key.
    pub fn is_under(key: &Key, owner: &str) -> bool {
        key.parts()
            .next()
            .is_some_and(|first| first == object_store::path::PathPart::from(owner))
    }

    /// The `file://` URI of `key`, as carried in events.
    pub fn uri(&self, key: &Key) -> String {
        let path = self.root.join(key.as_ref());
        match url::Url::from_file_path(&path) {
            Ok(u) => u.to_string(),
            Err(()) => format!("file://{}", path.display()),
        }
    }

    /// The key of a `file://` URI inside this store.
    pub fn key_of(&self, uri: &str) -> Result<Key, BlobError> {
        let foreign = |reason| BlobError::Foreign {
            uri: uri.to_owned(),
            reason,
        };
        let url = url::Url::parse(uri).map_err(|_| foreign("not a URI"))?;
        if url.scheme() != "file" {
            return Err(foreign("only file:// URIs are supported"));
        }
        let path = url
            .to_file_path()
            .map_err(|()| foreign("not a file path"))?;
        let rel = path
            .strip_prefix(&self.root)
            .map_err(|_| foreign("outside the object store directory"))?;
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(s) => parts.push(s.to_str().ok_or(foreign("not UTF-8"))?),
                _ => return Err(foreign("not a plain relative path")),
            }
        }
        if parts.is_empty() {
            return Err(foreign("names the store itself"));
        }
        Key::parse(parts.join("/")).map_err(|_| foreign("not a valid object key"))
    }

    /// Writes `bytes` under `key` (atomically: readers see the old or the new blob).
    pub async fn put(&self, key: &Key, bytes: Bytes) -> Result<(), BlobError> {
        self.store.put(key, PutPayload::from(bytes)).await?;
        Ok(())
    }

    /// Whether a blob can be written: a staged file is created and removed (readiness
    /// probes; an upload needs exactly this first).
    pub async fn probe(&self) -> Result<(), BlobError> {
        let staged = self.stage().await?;
        drop(staged);
        Ok(())
    }

    /// A new blob to write before its key is known; see [`Staged`].
    pub async fn stage(&self) -> Result<Staged, BlobError> {
        let dir = self.root.join(INCOMING);
        let path = dir.join(uuid::Uuid::new_v4().simple().to_string());
        let io = |source| BlobError::Staging {
            path: path.clone(),
            source,
        };
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        let file = tokio::fs::File::create(&path).await.map_err(io)?;
        Ok(Staged {
            file: Some(file),
            path,
            len: 0,
            committed: false,
        })
    }

    /// Moves a staged blob under `key` (atomically: one rename on the same file system;
    /// readers see the old blob or the new one, never a part).
    pub async fn commit(&self, mut staged: Staged, key: &Key) -> Result<(), BlobError> {
        staged.finish().await?;
        let target = self.store.path_to_filesystem(key)?;
        let io = |source| BlobError::Staging {
            path: staged.path.clone(),
            source,
        };
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(io)?;
        }
        tokio::fs::rename(&staged.path, &target).await.map_err(io)?;
        staged.committed = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_belong_to_their_first_segment() {
        let key = Blobs::key(["demo", "abc"]);
        assert!(Blobs::is_under(&key, "demo"));
        assert!(!Blobs::is_under(&key, "mallory"));
        assert!(!Blobs::is_under(&key, "dem"));
        // Segments are escaped: a tenant named "a/b" owns "a%2Fb/...", not "a/...".
        let odd = Blobs::key(["a/b", "x"]);
        assert!(Blobs::is_under(&odd, "a/b"));
        assert!(!Blobs::is_under(&odd, "a"));
    }

    #[tokio::test]
    async fn keys_uris_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(&dir.path().join("objects")).unwrap();
        let key = Blobs::key(["acme corp", "ab/cd"]);
        assert_eq!(key.parts().count(), 2, "a slash in a segment does not nest");
        blobs.put(&key, Bytes::from_static(b"hello")).await.unwrap();
        let uri = blobs.uri(&key);
        assert!(uri.starts_with("file:///"), "{uri}");
        let back = blobs.key_of(&uri).unwrap();
        assert_eq!(back, key);
        assert_eq!(
            blobs.get(&back).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        assert!(
            blobs
                .get(&Blobs::key(["acme corp", "missing"]))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn staged_blobs_commit_under_a_key_or_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let mut staged = blobs.stage().await.unwrap();
        staged.write(b"hel").await.unwrap();
        staged.write(b"lo").await.unwrap();
        assert_eq!(staged.len(), 5);
        staged.finish().await.unwrap();
        let path = staged.path().to_owned();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"hello",
            "written to the staged file"
        );
        let key = Blobs::key(["t", "doc"]);
        blobs.commit(staged, &key).await.unwrap();
        assert!(!path.exists());
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );

        let mut dropped = blobs.stage().await.unwrap();
        dropped.write(b"partial").await.unwrap();
        let path = dropped.path().to_owned();
        assert!(path.exists());
        drop(dropped);
        assert!(!path.exists(), "an uncommitted blob leaves nothing");
    }

    #[test]
    fn foreign_uris_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let root = blobs.root().display().to_string();
        for uri in [
            "s3://bucket/key".to_owned(),
            "file:///etc/passwd".to_owned(),
            format!("file://{root}/../escape"),
            format!("file://{root}"),
            "not a uri".to_owned(),
        ] {
            assert!(
                matches!(blobs.key_of(&uri), Err(BlobError::Foreign { .. })),
                "{uri} accepted"
            );
        }
    }
}
