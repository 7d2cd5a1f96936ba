//! Staging: a blob's bytes received before its key is known, held in memory up to a size
//! and then written to a file of the store's staging directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::spares::Spares;
use super::{BlobError, Blobs, Syncing};

/// Where blobs being received are written before they have a key: a directory of the store's
/// root (the same file system, so committing is one rename). Staged files are named by a
/// 32-digit UUID and a document's key ends in a 64-digit hash, so even a tenant named
/// `.incoming` could never name a staged file.
pub(super) const INCOMING: &str = ".incoming";

/// A blob being written before its key is known (an upload is keyed by the hash of its
/// bytes, known only at the end). Bytes go to a file in the store's directory as they arrive,
/// so a slow or large upload holds a file, not memory; a blob staged with
/// [`Blobs::stage_buffered`] is held in memory up to a size first, and written in one go by
/// [`Staged::flush`]. [`Blobs::commit`] moves it under its key atomically; dropping it
/// uncommitted removes the file.
#[derive(Debug)]
pub struct Staged {
    pub(super) body: Body,
    /// Most bytes held in memory before they go to the file.
    memory: usize,
    pub(super) path: PathBuf,
    len: u64,
    pub(super) committed: bool,
    /// Set when the blob is dropped uncommitted: a file created on a blocking thread after
    /// that (the request was cancelled meanwhile) is removed there.
    pub(super) gone: Arc<AtomicBool>,
    /// Files made ahead of need, when its store keeps some ([`Blobs::keep_spare_files`]).
    spares: Option<Arc<Spares>>,
}

/// Where a staged blob's bytes are.
#[derive(Debug)]
pub(super) enum Body {
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
pub(super) fn create_staged(path: &Path) -> std::io::Result<std::fs::File> {
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

/// Blocking: the staged file at `path` (`file` when it is open already: a spare,
/// or the file a streamed blob went to; else made now) with `bytes` written into it. A blob
/// dropped meanwhile (`gone`) loses the file here, as its own removal may have come before
/// the file did.
pub(super) fn fill_staged(
    file: Option<std::fs::File>,
    path: &Path,
    bytes: Option<Bytes>,
    gone: &AtomicBool,
) -> std::io::Result<std::fs::File> {
    use std::io::Write as _;
    let mut file = match file {
        Some(file) => file,
        None => create_staged(path)?,
    };
    if let Some(bytes) = bytes {
        file.write_all(&bytes)?;
    }
    if gone.load(Ordering::SeqCst) {
        let _ = std::fs::remove_file(path);
        return Err(std::io::Error::other("the blob was dropped"));
    }
    Ok(file)
}

impl Staged {
    /// A spare file made earlier ([`Spares`]), if there is one: its path becomes the blob's.
    pub(super) fn take_spare(&mut self) -> Option<std::fs::File> {
        let (path, file) = self.spares.as_ref()?.take()?;
        self.path = path;
        Some(file)
    }

    pub(super) fn io(&self, source: std::io::Error) -> BlobError {
        BlobError::Staging {
            path: self.path.clone(),
            source,
        }
    }

    /// Creates the staged file (or takes a spare one) and writes `first` into it (one trip to
    /// a blocking thread).
    async fn create(&mut self, first: Option<Bytes>) -> Result<tokio::fs::File, BlobError> {
        let spare = self.take_spare();
        let path = self.path.clone();
        let gone = self.gone.clone();
        let created = tokio::task::spawn_blocking(move || fill_staged(spare, &path, first, &gone))
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
            Body::Flushed => return Ok(Syncing::default()),
            Body::Memory(buf) => self.create(Some(Bytes::from(buf))).await?,
            Body::Held(bytes) => self.create(Some(bytes)).await?,
            Body::File(mut file) => {
                file.flush().await.map_err(|e| self.io(e))?;
                file
            }
        };
        let file = file.into_std().await;
        let path = self.path.clone();
        Ok(Syncing::file(tokio::task::spawn_blocking(move || {
            file.sync_data()
                .map_err(|source| BlobError::Staging { path, source })
        })))
    }

    /// Flushes the bytes and syncs them to disk; the blob can be read back from
    /// [`Staged::path`] after.
    pub async fn finish(&mut self) -> Result<(), BlobError> {
        self.flush().await?.wait().await
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

impl Blobs {
    /// Whether a blob can be written: a staged file is created and removed (readiness
    /// probes; an upload needs exactly this first).
    pub async fn probe(&self) -> Result<(), BlobError> {
        // A file of its own, not a spare: a spare proves nothing about the store now.
        let mut staged = self.stage_buffered(0);
        staged.spares = None;
        staged.create(None).await?;
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
            spares: self.spares.clone(),
        }
    }
}
