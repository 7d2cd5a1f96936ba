//! The blob store: document bytes and derived artifacts (thumbnails, ...) in a local
//! directory through `object_store`, the same directory for every service of a stack.
//!
//! Keys are built by the server from path segments (tenant, document id, stage, version), each
//! segment escaped, so no user input names a path. Events carry `file://` URIs of blobs; a
//! reader turns one back into a key with [`Blobs::key_of`], which refuses anything outside
//! the store, so a forged event cannot make a stage read an arbitrary file.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Files made ahead of need, when its store keeps some ([`Blobs::keep_spare_files`]).
    spares: Option<Arc<Spares>>,
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

/// Blocking: the staged file at `path` (`file` when it is open already: a spare,
/// or the file a streamed blob went to; else made now) with `bytes` written into it. A blob
/// dropped meanwhile (`gone`) loses the file here, as its own removal may have come before
/// the file did.
fn fill_staged(
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

/// Empty staged files made ahead of need ([`Blobs::keep_spare_files`]). Making a file is
/// the dearest step of writing a small blob: a new inode and its name cost 0.26 ms at p50 on
/// the ext4 disk of the machine the benchmarks run on, where writing 100 KiB into the file
/// costs 0.08 ms and linking it under its key 0.03 ms (and more on a network file system). So
/// a blob takes a file made earlier, and a new one is made off its path: a little later,
/// not at once, so that it does not hold the staging directory while the taker links and
/// unlinks there.
#[derive(Debug)]
struct Spares {
    /// The staging directory.
    dir: PathBuf,
    /// How many to keep.
    keep: usize,
    files: Mutex<Vec<(PathBuf, std::fs::File)>>,
    /// Whether a top-up is under way (one at a time).
    topping_up: AtomicBool,
    /// Set by [`Blobs::release_spare_files`]: none are kept from then on.
    released: AtomicBool,
}

/// How long after a spare file is taken the top-up starts.
const TOP_UP_DELAY: Duration = Duration::from_millis(5);

impl Spares {
    /// A spare file and its path, if one is left; the pool is topped up after.
    fn take(self: &Arc<Self>) -> Option<(PathBuf, std::fs::File)> {
        if self.released.load(Ordering::SeqCst) {
            return None;
        }
        let taken = self.files.lock().ok()?.pop();
        self.top_up(TOP_UP_DELAY);
        taken
    }

    /// Makes files until `keep` are ready, after `delay`, on a blocking thread (nothing when
    /// a top-up is running already, or outside a Tokio runtime). A failure ends the top-up:
    /// blobs then make their own files, and say why when that fails too.
    fn top_up(self: &Arc<Self>, delay: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.released.load(Ordering::SeqCst) || self.topping_up.swap(true, Ordering::SeqCst) {
            return;
        }
        /// Clears the flag however the top-up ends (a runtime shutting down drops it).
        struct Running(Arc<Spares>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.topping_up.store(false, Ordering::SeqCst);
            }
        }
        let running = Running(Arc::clone(self));
        runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            let this = Arc::clone(&running.0);
            let filler = Arc::clone(&this);
            let made = tokio::task::spawn_blocking(move || {
                while filler.files.lock().is_ok_and(|f| f.len() < filler.keep) {
                    let path = filler.dir.join(uuid::Uuid::new_v4().simple().to_string());
                    let file = create_staged(&path)?;
                    let Ok(mut files) = filler.files.lock() else {
                        break;
                    };
                    if filler.released.load(Ordering::SeqCst) {
                        // Released while it was made (the flag is set under the lock).
                        let _ = std::fs::remove_file(&path);
                        break;
                    }
                    files.push((path, file));
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            drop(running);
            match made {
                Ok(Ok(())) => {
                    // One taken after the last check of the loop, before the flag was
                    // cleared, found it set: make up for it.
                    if this.files.lock().is_ok_and(|f| f.len() < this.keep) {
                        this.top_up(TOP_UP_DELAY);
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, dir = %this.dir.display(), "making spare staged files failed");
                }
                Err(_) => {}
            }
        });
    }
}

impl Spares {
    /// Removes the files nobody took, and keeps none from now on.
    fn release(&self) {
        if let Ok(mut files) = self.files.lock() {
            self.released.store(true, Ordering::SeqCst);
            for (path, _) in files.drain(..) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        // Best effort: files nobody took leave with the store (a crash leaves them, empty).
        self.release();
    }
}

impl Staged {
    /// A spare file made earlier ([`Spares`]), if there is one: its path becomes the blob's.
    fn take_spare(&mut self) -> Option<std::fs::File> {
        let (path, file) = self.spares.as_ref()?.take()?;
        self.path = path;
        Some(file)
    }

    fn io(&self, source: std::io::Error) -> BlobError {
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

/// A staged blob's bytes on their way to disk ([`Staged::flush`]; with its directory entry,
/// from [`Blobs::check_and_commit`]).
#[derive(Debug, Default)]
#[must_use = "the bytes are durable only once `wait` returns"]
pub struct Syncing {
    task: Option<tokio::task::JoinHandle<Result<(), BlobError>>>,
    /// Whether the task syncs the blob's directory too (after its link under the key).
    dir: bool,
}

impl Syncing {
    fn file(task: tokio::task::JoinHandle<Result<(), BlobError>>) -> Self {
        Syncing {
            task: Some(task),
            dir: false,
        }
    }

    /// A sync of the bytes and then the directory entry.
    fn dir(task: tokio::task::JoinHandle<Result<(), BlobError>>) -> Self {
        Syncing {
            task: Some(task),
            dir: true,
        }
    }

    /// Returns once the bytes are on disk.
    pub async fn wait(self) -> Result<(), BlobError> {
        let Some(task) = self.task else {
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

/// Links the staged file `from` under `target` and removes its staged name, making the
/// key's directory the first time; a file already at `target` is kept when it holds the
/// same bytes, and replaced when it does not (see [`Blobs::commit`]).
fn link_under(from: &Path, target: &Path) -> std::io::Result<Committed> {
    let mut made_dir = false;
    let mut linked = std::fs::hard_link(from, target);
    if let Err(e) = &linked
        && e.kind() == std::io::ErrorKind::NotFound
        && from.exists()
        && let Some(parent) = target.parent()
    {
        std::fs::create_dir_all(parent)?;
        made_dir = true;
        linked = std::fs::hard_link(from, target);
    }
    match linked {
        Ok(()) => {
            match std::fs::remove_file(from) {
                // Removed already: the upload was dropped meanwhile (the blob stays linked).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                removed => removed?,
            }
            Ok(Committed::New { made_dir })
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if same_bytes(from, target)? {
                return Ok(Committed::Existing);
            }
            // Not the bytes its key names: a crash of the machine before an earlier upload's
            // sync can leave its file linked but short or zero-filled, and kept as it was,
            // every later upload of the bytes would be acknowledged over it while the stages
            // refuse it (digest mismatch). Replaced in one step (a reader sees the old file
            // or the new one), by bytes already on disk: two retries replacing it at once
            // must not leave the one answered first under a file whose sync never finished.
            std::fs::File::open(from)?.sync_data()?;
            std::fs::rename(from, target)?;
            tracing::warn!(blob = %target.display(), "a blob that did not hold its key's bytes was replaced");
            Ok(Committed::New { made_dir: false })
        }
        Err(e) => Err(e),
    }
}

/// Whether the file at `target` holds the bytes of the staged file at `staged`. A target
/// that cannot be read does not (it is replaced); a staged file that cannot be read is an
/// error.
fn same_bytes(staged: &Path, target: &Path) -> std::io::Result<bool> {
    use std::io::Read as _;
    let mut a = std::fs::File::open(staged)?;
    let Ok(mut b) = std::fs::File::open(target) else {
        return Ok(false);
    };
    let len = a.metadata()?.len();
    if b.metadata().ok().map(|m| m.len()) != Some(len) {
        return Ok(false);
    }
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut left = len;
    while left > 0 {
        let n = usize::try_from(left).map_or(x.len(), |l| l.min(x.len()));
        a.read_exact(&mut x[..n])?;
        if b.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return Ok(false);
        }
        left -= n as u64;
    }
    Ok(true)
}

/// Syncs the directory that holds `target` (`fsync`); with `made_dir`, every directory from
/// it up to `root` (see [`Blobs::sync_committed`]).
fn sync_dirs(target: &Path, root: &Path, made_dir: bool) -> Result<(), BlobError> {
    let mut dir = target.parent();
    while let Some(d) = dir {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|source| BlobError::Dir {
                dir: d.to_owned(),
                source,
            })?;
        if !made_dir || d == root || !d.starts_with(root) {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// What [`Blobs::check_and_commit`] does away from the async code: the check, then the
/// staged file written and linked under its key.
struct CheckAndLink {
    /// The staged file, when open already (a spare, or the file a streamed blob went to).
    file: Option<std::fs::File>,
    /// What is left to write into it.
    bytes: Option<Bytes>,
    path: PathBuf,
    target: PathBuf,
    gone: Arc<AtomicBool>,
}

/// A checked blob under its key ([`CheckAndLink::run`]).
struct Linked<T> {
    passed: T,
    committed: Committed,
    /// What makes a new blob durable (`None` once taken, and for a blob that was there).
    sync: Option<SyncNew>,
}

/// A new blob's bytes and name, to be made durable.
struct SyncNew {
    file: std::fs::File,
    path: PathBuf,
    target: PathBuf,
    made_dir: bool,
}

impl CheckAndLink {
    /// Blocks: `check`, then, when it passes, the bytes written and linked under the key.
    fn run<T, E>(
        self,
        check: impl FnOnce() -> Result<T, E>,
    ) -> std::io::Result<Result<Linked<T>, E>> {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check))
            .map_err(|_| std::io::Error::other("the blob's check panicked"))?;
        let passed = match checked {
            Ok(passed) => passed,
            Err(refused) => return Ok(Err(refused)),
        };
        let file = fill_staged(self.file, &self.path, self.bytes, &self.gone)?;
        let committed = link_under(&self.path, &self.target)?;
        let sync = match committed {
            Committed::New { made_dir } => Some(SyncNew {
                file,
                path: self.path,
                target: self.target,
                made_dir,
            }),
            Committed::Existing => None,
        };
        Ok(Ok(Linked {
            passed,
            committed,
            sync,
        }))
    }
}

/// The sync of a new blob out of what [`CheckAndLink::run`] did (`None` for a blob that was
/// there, a refusal or a failure).
fn take_sync<T, E>(done: &mut std::io::Result<Result<Linked<T>, E>>) -> Option<SyncNew> {
    match done {
        Ok(Ok(linked)) => linked.sync.take(),
        _ => None,
    }
}

impl SyncNew {
    /// Blocks: the bytes, then the new name. The first sync commits the link with the bytes
    /// (one journal commit on ext4), so the directory's sync finds little left to do.
    fn run(self, root: &Path) -> Result<(), BlobError> {
        self.file.sync_data().map_err(|source| BlobError::Staging {
            path: self.path,
            source,
        })?;
        sync_dirs(&self.target, root, self.made_dir)
    }
}

/// What [`Blobs::check_and_commit`] did.
#[derive(Debug)]
pub enum Checked<T, E> {
    /// The check passed (with what it returned); the blob is under its key.
    Kept {
        /// What the check returned.
        passed: T,
        /// What the commit did.
        committed: Committed,
        /// A new blob's bytes on their way to disk.
        syncing: Syncing,
    },
    /// The check refused the bytes: nothing was written under the key.
    Refused(E),
}

/// What [`Blobs::commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The staged blob is now under the key.
    New {
        /// Whether the key's directory was made for it.
        made_dir: bool,
    },
    /// A blob with the same bytes was already under the key; it was kept and the staged one
    /// dropped.
    Existing,
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

    /// Keeps `count` empty staged files made ahead of need (see [`Spares`]), so a blob being
    /// staged does not make its own file on the upload's path; they are made on a blocking
    /// thread from now on (within a Tokio runtime), and those not taken are removed when
    /// the last clone of the store, and of the blobs staged from it, is dropped. For the
    /// service that stages many blobs (ingest).
    #[must_use]
    pub fn keep_spare_files(mut self, count: usize) -> Self {
        let spares = Arc::new(Spares {
            dir: self.root.join(INCOMING),
            keep: count,
            files: Mutex::new(Vec::with_capacity(count)),
            topping_up: AtomicBool::new(false),
            released: AtomicBool::new(false),
        });
        spares.top_up(Duration::ZERO);
        self.spares = (count > 0).then_some(spares);
        self
    }

    /// Removes the spare files nobody took ([`Blobs::keep_spare_files`]) and keeps none from
    /// now on, for every clone of the store: at shutdown, where the store itself may outlive
    /// the process's last tasks.
    pub fn release_spare_files(&self) {
        if let Some(spares) = &self.spares {
            spares.release();
        }
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

    /// Puts a staged blob under `key` atomically (a hard link, then the staged name is
    /// removed: readers see the blob whole or not at all). A blob already under the key that
    /// holds the same bytes (compared, one read of each) is kept as it is: keys name their
    /// bytes (tenant and SHA-256), and replacing it with a file whose sync is still running
    /// could leave a crash with less than an earlier acknowledged upload had. One that does
    /// not (cut short or zero-filled by a crash of the machine before its sync) is replaced
    /// by a rename, reported as [`Committed::New`]. Says which happened, and whether the
    /// key's directory was made (see [`Blobs::sync_dir_of`]).
    pub async fn commit(&self, mut staged: Staged, key: &Key) -> Result<Committed, BlobError> {
        staged.finish().await?;
        let target = self.store.path_to_filesystem(key)?;
        let io = |source| BlobError::Staging {
            path: staged.path.clone(),
            source,
        };
        // One trip to a blocking thread.
        let from = staged.path.clone();
        let linked = tokio::task::spawn_blocking(move || link_under(&from, &target));
        let committed = linked
            .await
            .map_err(std::io::Error::other)
            .map_err(io)?
            .map_err(io)?;
        // A new blob's staged name is gone; an existing one's staged file is removed on drop.
        staged.committed = matches!(committed, Committed::New { .. });
        Ok(committed)
    }

    /// Runs `check` and, when it passes, writes out the blob and puts it under `key` as
    /// [`Blobs::commit`] does, then syncs a new blob's bytes (`fdatasync`) and its directory.
    /// On a multi-threaded runtime the check, the write and the link run on the caller's
    /// thread, in [`tokio::task::block_in_place`] (the runtime hands the thread's other tasks
    /// to another thread meanwhile; futures joined or selected with this call in the same
    /// task wait for it); on a current-thread runtime, on one blocking thread, there and
    /// back. A blob streaming to its file is flushed first. A panic in `check` is an error
    /// of the staged blob, as an I/O failure is. Bytes that `check` refuses are never written
    /// or keyed; their staged file, if any, goes when `staged` is dropped. Returns once the
    /// key is taken, with the sync running on a blocking thread (for
    /// [`Blobs::sync_committed`]). After the first call there is nothing left to write.
    pub async fn check_and_commit<T, E>(
        &self,
        staged: &mut Staged,
        key: &Key,
        check: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<Checked<T, E>, BlobError>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        use tokio::io::AsyncWriteExt;
        let target = self.store.path_to_filesystem(key)?;
        let (file, bytes) = match std::mem::replace(&mut staged.body, Body::Flushed) {
            Body::Flushed => return Err(staged.io(std::io::Error::other("already written"))),
            Body::Memory(buf) => (None, Some(Bytes::from(buf))),
            Body::Held(bytes) => (None, Some(bytes)),
            Body::File(mut file) => {
                file.flush().await.map_err(|e| staged.io(e))?;
                (Some(file.into_std().await), None)
            }
        };
        let file = file.or_else(|| staged.take_spare());
        let job = CheckAndLink {
            file,
            bytes,
            path: staged.path.clone(),
            target,
            gone: staged.gone.clone(),
        };
        let root = self.root.clone();
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let (done, syncing) = if multi_thread {
            let mut done = tokio::task::block_in_place(|| job.run(check));
            // A blob that was already there is synced by `sync_committed`.
            let syncing = take_sync(&mut done).map_or_else(Syncing::default, |sync| {
                Syncing::dir(tokio::task::spawn_blocking(move || sync.run(&root)))
            });
            (done, syncing)
        } else {
            // On one blocking thread: the answer comes back once the key is taken, and the
            // same thread goes on to sync.
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            let task = tokio::task::spawn_blocking(move || {
                let mut done = job.run(check);
                let sync = take_sync(&mut done);
                let _ = done_tx.send(done);
                sync.map_or(Ok(()), |sync| sync.run(&root))
            });
            let done = done_rx
                .await
                .map_err(|_| std::io::Error::other("the blob's writer stopped"));
            let done = done.and_then(|d| d);
            (done, Syncing::dir(task))
        };
        Ok(match done.map_err(|e| staged.io(e))? {
            Ok(linked) => {
                // A new blob's staged name is gone; an existing one's staged file is removed
                // on drop.
                staged.committed = matches!(linked.committed, Committed::New { .. });
                Checked::Kept {
                    passed: linked.passed,
                    committed: linked.committed,
                    syncing,
                }
            }
            Err(refused) => Checked::Refused(refused),
        })
    }

    /// Makes a blob [`Blobs::commit`]ted under `key` durable, so that it survives a crash of
    /// the machine, not only of the process: a new blob's bytes (`syncing`, from
    /// [`Staged::flush`]) and its directory entry, with the directories above when the
    /// commit made its directory (a blob from [`Blobs::check_and_commit`] has its sync of
    /// both running already); a blob that was already there is synced again (an earlier
    /// writer may not have lived to sync it) with its directories up to the store's root.
    pub async fn sync_committed(
        &self,
        key: &Key,
        committed: Committed,
        syncing: Syncing,
    ) -> Result<(), BlobError> {
        let (file, dir) = match committed {
            // Synced with its directory already (`check_and_commit`).
            Committed::New { .. } if syncing.dir => return syncing.wait().await,
            Committed::New { made_dir } => {
                tokio::join!(syncing.wait(), self.sync_dir_of(key, made_dir))
            }
            // Its directories up to the root too: the writer that made them may not have
            // lived to sync them.
            Committed::Existing => tokio::join!(self.sync_blob(key), self.sync_dir_of(key, true)),
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
        tokio::task::spawn_blocking(move || sync_dirs(&target, &root, made_dir))
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

    /// Files in the staging directory: (how many, bytes in all).
    fn staging(blobs: &Blobs) -> (usize, u64) {
        std::fs::read_dir(blobs.root().join(INCOMING)).map_or((0, 0), |dir| {
            dir.map(|e| e.unwrap().metadata().unwrap().len())
                .fold((0, 0), |(n, b), len| (n + 1, b + len))
        })
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The check runs first and decides: refused bytes never reach a file or the key; passed
    /// ones are written, keyed (a blob already there kept) and synced. With spare files kept,
    /// a blob takes one (no file made on its path) and the pool is made whole again; they
    /// go with the store.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checked_blobs_take_spare_files_and_refused_ones_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap().keep_spare_files(3);
        until("three spare files made", || staging(&blobs) == (3, 0)).await;
        let spares: Vec<PathBuf> = std::fs::read_dir(blobs.root().join(INCOMING))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();

        let key = Blobs::key(["t", "doc"]);
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"hello").await.unwrap();
        // On a runtime worker the check runs on the caller's thread (no hop).
        let (checked, staged) = tokio::spawn({
            let (blobs, key) = (blobs.clone(), key.clone());
            async move {
                let on = std::thread::current().id();
                let checked = blobs
                    .check_and_commit(&mut staged, &key, move || {
                        Ok::<_, ()>((7, std::thread::current().id() == on))
                    })
                    .await
                    .unwrap();
                (checked, staged)
            }
        })
        .await
        .unwrap();
        let (passed, committed, syncing) = kept(checked);
        assert_eq!(
            (passed, committed),
            ((7, true), Committed::New { made_dir: true })
        );
        assert!(
            spares.contains(&staged.path().to_owned()),
            "a spare was taken"
        );
        syncing.wait().await.unwrap();
        drop(staged);
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        until("the spare taken is made again", || {
            staging(&blobs) == (3, 0)
        })
        .await;

        // The same bytes again: the blob there is kept, the new staged file goes.
        let (committed, _, again) = commit_checked(&blobs, &key, b"hello").await;
        assert_eq!(committed, Committed::Existing);
        drop(again);

        // Refused: nothing under the key, no bytes staged.
        let bad = Blobs::key(["t", "bad"]);
        refused_leaves_nothing(&blobs, &bad).await;
        until("back to three empty spares", || staging(&blobs) == (3, 0)).await;

        // A check that panics: an error, nothing under the key, nothing staged.
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"boom").await.unwrap();
        let panicked = blobs
            .check_and_commit(&mut staged, &bad, || -> Result<(), ()> { panic!("a bug") })
            .await;
        assert!(matches!(panicked, Err(BlobError::Staging { .. })));
        drop(staged);
        assert!(blobs.get(&bad).await.unwrap().is_none());
        until("three empty spares again", || staging(&blobs) == (3, 0)).await;

        // A store without spares makes its own file.
        let plain = Blobs::open(dir.path()).unwrap();
        let mut staged = plain.stage_buffered(1 << 20);
        staged.write(b"plain").await.unwrap();
        let own = staged.path().to_owned();
        let checked = plain
            .check_and_commit(&mut staged, &Blobs::key(["t", "plain"]), || Ok::<_, ()>(()))
            .await
            .unwrap();
        assert!(matches!(checked, Checked::Kept { .. }));
        assert_eq!(staged.path(), own);

        // Released (shutdown): the spares go at once, and a blob makes its own file.
        let other = Blobs::open(&dir.path().join("other"))
            .unwrap()
            .keep_spare_files(2);
        until("two spare files made", || staging(&other) == (2, 0)).await;
        other.release_spare_files();
        assert_eq!(staging(&other), (0, 0));
        let mut own = other.stage_buffered(1 << 20);
        own.write(b"own").await.unwrap();
        let path = own.path().to_owned();
        own.flush().await.unwrap().wait().await.unwrap();
        assert_eq!(own.path(), path, "no spare taken");
        drop(own);
        tokio::time::sleep(TOP_UP_DELAY * 4).await;
        assert_eq!(staging(&other), (0, 0), "none made again");

        // The spares go with the last clone of the store (a top-up ending holds one a
        // moment longer).
        let clone = blobs.clone();
        drop(blobs);
        assert_eq!(staging(&clone), (3, 0));
        drop(clone);
        until("spares removed", || staging(&plain) == (0, 0)).await;
    }

    /// On a current-thread runtime (where `block_in_place` is not allowed) the check, the
    /// write and the link run on a blocking thread instead, with the same outcomes.
    #[tokio::test(flavor = "current_thread")]
    async fn checked_blobs_on_a_current_thread_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let key = Blobs::key(["t", "doc"]);
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"hello").await.unwrap();
        let on = std::thread::current().id();
        let checked = blobs
            .check_and_commit(&mut staged, &key, move || {
                Ok::<_, ()>(std::thread::current().id() != on)
            })
            .await
            .unwrap();
        let (passed, committed, syncing) = kept(checked);
        assert!(passed, "checked on another thread");
        assert_eq!(committed, Committed::New { made_dir: true });
        blobs
            .sync_committed(&key, committed, syncing)
            .await
            .unwrap();
        drop(staged);
        assert_eq!(
            blobs.get(&key).await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );

        let (committed, syncing, again) = commit_checked(&blobs, &key, b"hello").await;
        assert_eq!(committed, Committed::Existing);
        blobs
            .sync_committed(&key, committed, syncing)
            .await
            .unwrap();
        drop(again);

        refused_leaves_nothing(&blobs, &Blobs::key(["t", "bad"])).await;
        assert_eq!(staging(&blobs), (0, 0), "nothing left staged");
    }

    /// A blob under its key that is not the key's bytes (what a crash of the machine before
    /// its sync can leave: the link kept, the bytes cut short or zero-filled) is replaced by
    /// the next upload of the bytes, on both ways in; one that is the same bytes is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blob_that_is_not_its_keys_bytes_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = Blobs::open(dir.path()).unwrap();
        let key = Blobs::key(["t", "doc"]);
        let path = blobs.store.path_to_filesystem(&key).unwrap();
        let bytes = b"the document's bytes".to_vec();
        let (committed, syncing, first) = commit_checked(&blobs, &key, &bytes).await;
        assert_eq!(committed, Committed::New { made_dir: true });
        syncing.wait().await.unwrap();
        drop(first);

        // Held in memory (`check_and_commit`): the same length, zero-filled; then cut short.
        for broken in [vec![0u8; bytes.len()], bytes[..4].to_vec()] {
            std::fs::write(&path, &broken).unwrap();
            let (committed, syncing, again) = commit_checked(&blobs, &key, &bytes).await;
            assert_eq!(committed, Committed::New { made_dir: false }, "replaced");
            blobs
                .sync_committed(&key, committed, syncing)
                .await
                .unwrap();
            assert!(!again.path().exists(), "the staged name became the key's");
            drop(again);
            assert_eq!(blobs.get(&key).await.unwrap(), Some(bytes.clone().into()));
        }
        // The right bytes are kept.
        let (committed, _, again) = commit_checked(&blobs, &key, &bytes).await;
        assert_eq!(committed, Committed::Existing);
        drop(again);

        // Past the first 64 KiB read: one byte flipped in the fourth.
        let big_key = Blobs::key(["t", "big"]);
        let big: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
        let (committed, syncing, first) = commit_checked(&blobs, &big_key, &big).await;
        assert_eq!(committed, Committed::New { made_dir: false });
        syncing.wait().await.unwrap();
        drop(first);
        let (committed, _, again) = commit_checked(&blobs, &big_key, &big).await;
        assert_eq!(committed, Committed::Existing, "the same 200 KiB");
        drop(again);
        let big_path = blobs.store.path_to_filesystem(&big_key).unwrap();
        let mut flipped = big.clone();
        flipped[150 * 1024] ^= 1;
        std::fs::write(&big_path, &flipped).unwrap();
        let (committed, syncing, again) = commit_checked(&blobs, &big_key, &big).await;
        assert_eq!(
            committed,
            Committed::New { made_dir: false },
            "one byte off"
        );
        syncing.wait().await.unwrap();
        drop(again);
        assert_eq!(std::fs::read(&big_path).unwrap(), big);

        // Streamed to its file (`commit`): an empty file under the key.
        std::fs::write(&path, b"").unwrap();
        let mut staged = blobs.stage_buffered(4);
        staged.write(&bytes).await.unwrap();
        let syncing = staged.flush().await.unwrap();
        let committed = blobs.commit(staged, &key).await.unwrap();
        assert_eq!(committed, Committed::New { made_dir: false });
        blobs
            .sync_committed(&key, committed, syncing)
            .await
            .unwrap();
        assert_eq!(blobs.get(&key).await.unwrap(), Some(bytes.clone().into()));
        assert_eq!(staging(&blobs), (0, 0), "nothing left staged");
    }

    /// What a check that passed returned, and what the commit did.
    fn kept<T: std::fmt::Debug, E: std::fmt::Debug>(
        checked: Checked<T, E>,
    ) -> (T, Committed, Syncing) {
        match checked {
            Checked::Kept {
                passed,
                committed,
                syncing,
            } => (passed, committed, syncing),
            refused => panic!("refused: {refused:?}"),
        }
    }

    /// `bytes` staged and put under `key` with a check that passes.
    async fn commit_checked(
        blobs: &Blobs,
        key: &Key,
        bytes: &[u8],
    ) -> (Committed, Syncing, Staged) {
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(bytes).await.unwrap();
        let checked = blobs
            .check_and_commit(&mut staged, key, || Ok::<_, ()>(()))
            .await
            .unwrap();
        let (_, committed, syncing) = kept(checked);
        (committed, syncing, staged)
    }

    /// A blob its check refuses: refused, and nothing under `key`.
    async fn refused_leaves_nothing(blobs: &Blobs, key: &Key) {
        let mut staged = blobs.stage_buffered(1 << 20);
        staged.write(b"not a document").await.unwrap();
        let checked = blobs
            .check_and_commit(&mut staged, key, || Err::<(), _>("refused"))
            .await
            .unwrap();
        assert!(matches!(checked, Checked::Refused("refused")));
        drop(staged);
        assert!(blobs.get(key).await.unwrap().is_none());
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
