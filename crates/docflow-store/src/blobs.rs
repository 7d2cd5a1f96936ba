//! The blob store: document bytes and derived artifacts (thumbnails, ...) in a local
//! directory through `object_store`, the same directory for every service of a stack.
//!
//! Keys are built by the server from path segments (tenant, document id, stage, version), each
//! segment escaped, so no user input names a path. Events carry `file://` URIs of blobs; a
//! reader turns one back into a key with [`Blobs::key_of`], which refuses anything outside
//! the store, so a forged event cannot make a stage read an arbitrary file.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
/// so a slow or large upload holds a file, not memory; a blob staged with
/// [`Blobs::stage_buffered`] is held in memory up to a size first, and written in one go by
/// [`Staged::flush`]. [`Blobs::commit`] moves it under its key atomically; dropping it
/// uncommitted removes the file.
#[derive(Debug)]
pub struct Staged {
    body: Body,
    /// Most bytes held in memory before they go to the file.
    memory: usize,
    path: PathBuf,
    len: u64,
    committed: bool,
    /// Set when the blob is dropped uncommitted: a file created on a blocking thread after
    /// that (the request was cancelled meanwhile) is removed there.
    gone: Arc<AtomicBool>,
}

/// Where a staged blob's bytes are.
#[derive(Debug)]
enum Body {
    /// In memory, still growing.
    Memory(Vec<u8>),
    /// In memory, complete and shared ([`Staged::held`]).
    Held(Bytes),
    /// In the staged file.
    File(tokio::fs::File),
    /// Written out ([`Staged::flush`]).
    Flushed,
}

/// Creates the staged file at `path`, and its directory the first time.
fn create_staged(path: &Path) -> std::io::Result<std::fs::File> {
    match std::fs::File::create(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::File::create(path)
        }
        created => created,
    }
}

impl Staged {
    fn io(&self, source: std::io::Error) -> BlobError {
        BlobError::Staging {
            path: self.path.clone(),
            source,
        }
    }

    /// Creates the staged file and writes `first` into it (one trip to a blocking thread).
    async fn create(&self, first: Option<Bytes>) -> Result<tokio::fs::File, BlobError> {
        use std::io::Write as _;
        let path = self.path.clone();
        let gone = self.gone.clone();
        let created = tokio::task::spawn_blocking(move || {
            let mut file = create_staged(&path)?;
            if let Some(bytes) = first {
                file.write_all(&bytes)?;
            }
            if gone.load(Ordering::SeqCst) {
                // Dropped while this ran: its own removal may have come before the file.
                let _ = std::fs::remove_file(&path);
            }
            Ok::<_, std::io::Error>(file)
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        created
            .map(tokio::fs::File::from_std)
            .map_err(|e| self.io(e))
    }

    /// Appends `chunk`.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), BlobError> {
        use tokio::io::AsyncWriteExt;
        match &mut self.body {
            Body::Memory(buf) if buf.len() + chunk.len() <= self.memory => {
                // Grown by doubling, but never past the limit: at most `memory` bytes held.
                let need = buf.len() + chunk.len();
                if need > buf.capacity() {
                    let grown = (buf.capacity() * 2).max(need).min(self.memory);
                    buf.reserve_exact(grown - buf.len());
                }
                buf.extend_from_slice(chunk);
            }
            Body::Memory(buf) => {
                // Too big to hold: what came so far goes to the file, and the rest follows.
                let so_far = Bytes::from(std::mem::take(buf));
                match self.create(Some(so_far)).await {
                    Ok(file) => self.body = Body::File(file),
                    Err(e) => {
                        // Its start is gone from memory: no later write may look like a blob.
                        self.body = Body::Flushed;
                        return Err(e);
                    }
                }
                return Box::pin(self.write(chunk)).await;
            }
            Body::File(file) => {
                let written = file.write_all(chunk).await;
                written.map_err(|e| self.io(e))?;
            }
            Body::Held(_) | Body::Flushed => {
                return Err(self.io(std::io::Error::other("already complete")));
            }
        }
        self.len += chunk.len() as u64;
        Ok(())
    }

    /// The whole blob, when it is held in memory (cheap to clone): checks can read it
    /// without reading the file back. Ends writing.
    pub fn held(&mut self) -> Option<Bytes> {
        if let Body::Memory(buf) = &mut self.body {
            self.body = Body::Held(Bytes::from(std::mem::take(buf)));
        }
        match &self.body {
            Body::Held(bytes) => Some(bytes.clone()),
            _ => None,
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The staged file (to read it back for checks before committing); a blob held in
    /// memory has one only after [`Staged::flush`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes out what is buffered or held, so the blob can be read back from
    /// [`Staged::path`], and starts syncing it to disk (`fdatasync`) on a blocking thread: the
    /// bytes are durable once the returned [`Syncing`] says so. Checks, the rename under a
    /// key and other work can go on meanwhile. After the first call there is nothing left to
    /// write or sync.
    pub async fn flush(&mut self) -> Result<Syncing, BlobError> {
        use tokio::io::AsyncWriteExt;
        let file = match std::mem::replace(&mut self.body, Body::Flushed) {
            Body::Flushed => return Ok(Syncing(None)),
            Body::Memory(buf) => self.create(Some(Bytes::from(buf))).await?,
            Body::Held(bytes) => self.create(Some(bytes)).await?,
            Body::File(mut file) => {
                file.flush().await.map_err(|e| self.io(e))?;
                file
            }
        };
        let file = file.into_std().await;
        let path = self.path.clone();
        Ok(Syncing(Some(tokio::task::spawn_blocking(move || {
            file.sync_data()
                .map_err(|source| BlobError::Staging { path, source })
        }))))
    }

    /// Flushes the bytes and syncs them to disk; the blob can be read back from
    /// [`Staged::path`] after.
    pub async fn finish(&mut self) -> Result<(), BlobError> {
        self.flush().await?.wait().await
    }
}

/// A staged blob's bytes on their way to disk ([`Staged::flush`]).
#[derive(Debug)]
#[must_use = "the bytes are durable only once `wait` returns"]
pub struct Syncing(Option<tokio::task::JoinHandle<Result<(), BlobError>>>);

impl Syncing {
    /// Returns once the bytes are on disk.
    pub async fn wait(self) -> Result<(), BlobError> {
        let Some(task) = self.0 else {
            return Ok(());
        };
        task.await.map_err(|e| BlobError::Staging {
            path: PathBuf::new(),
            source: std::io::Error::other(e),
        })?
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: an uncommitted upload (refused, timed out, duplicate) leaves nothing.
            self.gone.store(true, Ordering::SeqCst);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What [`Blobs::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The staged blob is now under the key.
    New {
        /// Whether the key's directory was made for it.
        made_dir: bool,
    },
    /// A blob was already under the key (the same bytes); it was kept and the staged one
    /// dropped.
    Existing,
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

    /// A new blob to write before its key is known; see [`Staged`]. Its file is created
    /// at once.
    pub async fn stage(&self) -> Result<Staged, BlobError> {
        let mut staged = self.stage_buffered(0);
        let file = staged.create(None).await?;
        staged.body = Body::File(file);
        Ok(staged)
    }

    /// A new blob held in memory while it is at most `memory` bytes (written to its file in
    /// one go by [`Staged::flush`], and readable from [`Staged::held`] meanwhile); a bigger
    /// one goes on to its file as the bytes arrive. Nothing touches the disk until then.
    pub fn stage_buffered(&self, memory: usize) -> Staged {
        let path = self
            .root
            .join(INCOMING)
            .join(uuid::Uuid::new_v4().simple().to_string());
        Staged {
            body: Body::Memory(Vec::new()),
            memory,
            path,
            len: 0,
            committed: false,
            gone: Arc::default(),
        }
    }

    /// Puts a staged blob under `key` atomically (a hard link, then the staged name is
    /// removed: readers see the blob whole or not at all). A blob already under the key is
    /// kept as it is, never replaced: keys name their bytes (tenant and SHA-256), so it holds
    /// the same bytes, and replacing it with a file whose sync is still running could leave
    /// a crash with less than an earlier acknowledged upload had. Says which happened, and
    /// whether the key's directory was made (see [`Blobs::sync_dir_of`]).
    pub async fn commit(&self, mut staged: Staged, key: &Key) -> Result<Committed, BlobError> {
        staged.finish().await?;
        let target = self.store.path_to_filesystem(key)?;
        let io = |source| BlobError::Staging {
            path: staged.path.clone(),
            source,
        };
        // One trip to a blocking thread: the key's directory is made only the first time.
        let from = staged.path.clone();
        let linked = tokio::task::spawn_blocking(move || {
            let mut made_dir = false;
            let mut linked = std::fs::hard_link(&from, &target);
            if let Err(e) = &linked
                && e.kind() == std::io::ErrorKind::NotFound
                && from.exists()
                && let Some(parent) = target.parent()
            {
                std::fs::create_dir_all(parent)?;
                made_dir = true;
                linked = std::fs::hard_link(&from, &target);
            }
            match linked {
                Ok(()) => {
                    std::fs::remove_file(&from)?;
                    Ok(Committed::New { made_dir })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Committed::Existing),
                Err(e) => Err(e),
            }
        });
        let committed = linked
            .await
            .map_err(std::io::Error::other)
            .map_err(io)?
            .map_err(io)?;
        // A new blob's staged name is gone; an existing one's staged file is removed on drop.
        staged.committed = matches!(committed, Committed::New { .. });
        Ok(committed)
    }

    /// Makes a blob [`Blobs::commit`]ted under `key` durable, so that it survives a crash of
    /// the machine, not only of the process: a new blob's bytes (`syncing`, from
    /// [`Staged::flush`]) and its directory entry, with the directories above when the
    /// commit made its directory; a blob that was already there is synced again (an earlier
    /// writer may not have lived to sync it) with its directory.
    pub async fn sync_committed(
        &self,
        key: &Key,
        committed: Committed,
        syncing: Syncing,
    ) -> Result<(), BlobError> {
        let (file, dir) = match committed {
            Committed::New { made_dir } => {
                tokio::join!(syncing.wait(), self.sync_dir_of(key, made_dir))
            }
            Committed::Existing => tokio::join!(self.sync_blob(key), self.sync_dir_of(key, false)),
        };
        file.and(dir)
    }

    /// Syncs the blob under `key` to disk (`fdatasync`).
    async fn sync_blob(&self, key: &Key) -> Result<(), BlobError> {
        let path = self.store.path_to_filesystem(key)?;
        tokio::task::spawn_blocking(move || {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_data())
                .map_err(|source| BlobError::Staging { path, source })
        })
        .await
        .map_err(|e| BlobError::Staging {
            path: PathBuf::new(),
            source: std::io::Error::other(e),
        })?
    }

    /// Syncs the directory that holds `key` (`fsync` on the directory): a new name is
    /// durable once its directory is. With `made_dir`, every directory from it up to the
    /// store's root is synced, so the new directory's own entry is durable too.
    async fn sync_dir_of(&self, key: &Key, made_dir: bool) -> Result<(), BlobError> {
        let target = self.store.path_to_filesystem(key)?;
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || {
            let mut dir = target.parent();
            while let Some(d) = dir {
                std::fs::File::open(d)
                    .and_then(|f| f.sync_all())
                    .map_err(|source| BlobError::Dir {
                        dir: d.to_owned(),
                        source,
                    })?;
                if !made_dir || d == root || !d.starts_with(&root) {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
        .await
        .map_err(|e| BlobError::Dir {
            dir: PathBuf::new(),
            source: std::io::Error::other(e),
        })?
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
        assert_eq!(
            blobs.commit(staged, &key).await.unwrap(),
            Committed::New { made_dir: true }
        );
        blobs.sync_dir_of(&key, true).await.unwrap();
        assert!(!path.exists());
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );

        // Flushed, renamed while its sync runs, then durable: the same bytes under the key.
        let mut early = blobs.stage().await.unwrap();
        early.write(b"early").await.unwrap();
        let syncing = early.flush().await.unwrap();
        assert_eq!(std::fs::read(early.path()).unwrap(), b"early");
        let key = Blobs::key(["t", "early"]);
        assert_eq!(
            blobs.commit(early, &key).await.unwrap(),
            Committed::New { made_dir: false }
        );
        syncing.wait().await.unwrap();
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"early"[..])
        );

        // Held in memory: no file until it is flushed, the bytes readable meanwhile.
        let mut small = blobs.stage_buffered(8);
        small.write(b"small").await.unwrap();
        assert!(!small.path().exists(), "held in memory");
        assert_eq!(small.held().as_deref(), Some(&b"small"[..]));
        assert!(small.write(b"more").await.is_err(), "held means complete");
        let syncing = small.flush().await.unwrap();
        assert_eq!(std::fs::read(small.path()).unwrap(), b"small");
        syncing.wait().await.unwrap();
        let key = Blobs::key(["t", "small"]);
        blobs.commit(small, &key).await.unwrap();
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"small"[..])
        );
        // The same key again: the blob there is kept, the staged one removed.
        let mut again = blobs.stage_buffered(8);
        again.write(b"small").await.unwrap();
        again.flush().await.unwrap().wait().await.unwrap();
        let staged_path = again.path().to_owned();
        assert_eq!(
            blobs.commit(again, &key).await.unwrap(),
            Committed::Existing
        );
        assert!(!staged_path.exists(), "the staged copy is removed");
        blobs.sync_blob(&key).await.unwrap();
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"small"[..])
        );
        // Past the memory limit it goes on to its file as it arrives.
        let mut big = blobs.stage_buffered(4);
        big.write(b"hel").await.unwrap();
        assert!(!big.path().exists());
        big.write(b"lo, world").await.unwrap();
        assert!(big.path().exists(), "spilled to its file");
        assert_eq!(big.held(), None);
        assert_eq!(big.len(), 12);
        big.finish().await.unwrap();
        assert_eq!(std::fs::read(big.path()).unwrap(), b"hello, world");
        drop(big);

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
